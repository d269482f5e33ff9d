// podgpu live page: polls ./api/v1/snapshot every collect interval and redraws the
// server-rendered summary in place. Every pod-supplied string goes in through textContent, never
// innerHTML. Number formats repeat podgpu/sinks/live/fmt.py exactly (floor(x + 0.5)), so the
// page, its plain summary and `podgpu top` print the same text for the same snapshot.
"use strict";
(function () {
  const WINDOW_S = 300; // charts keep the last 5 minutes, in the browser only
  const GIB = 1073741824;
  const DASH = "-";
  const body = document.body;
  const interval = Math.max(0.2, parseFloat(body.dataset.interval) || 1);
  const history = new Map(); // device key -> {t: [], util: [], mem: []}
  const charts = new Map(); // device key -> uPlot
  let lastTaken = null;
  let lastChange = Date.now();

  const percent = (r) => (r === null || r === undefined ? DASH : Math.floor(r * 100 + 0.5) + "%");
  const gib = (b) => {
    if (b === null || b === undefined) return DASH;
    const tenths = Math.floor((b * 10) / GIB + 0.5);
    return Math.floor(tenths / 10) + "." + (tenths % 10) + " GiB";
  };
  const watts = (w) => (w === null || w === undefined ? DASH : Math.floor(w + 0.5) + " W");
  const celsius = (c) => (c === null || c === undefined ? DASH : Math.floor(c + 0.5) + " °C");
  const utc = (t) => new Date(t * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC";

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function statusLine(v) {
    const h = v.health;
    let s = v.backend + " · cycle " + v.cycle + " · " + utc(v.taken_at) + " · " + h.status;
    if (h.reasons.length) s += ": " + h.reasons.join("; ");
    return s;
  }

  function tileRows(d) {
    let mem = gib(d.memory_used_bytes);
    if (d.memory_total_bytes !== null) mem += " / " + gib(d.memory_total_bytes);
    const holders = d.holders.length
      ? d.holders.map((h) => h.namespace + "/" + h.pod).join(", ")
      : "none";
    return [
      ["util", "Utilization", percent(d.utilization_ratio)],
      ["mem", "Memory", mem],
      ["power", "Power", watts(d.power_watts)],
      ["temp", "Temperature", celsius(d.temperature_celsius)],
      ["holders", "Pods", holders],
      ["sharing", "Sharing", d.sharing],
    ];
  }

  function newTile(d) {
    const art = el("article");
    art.dataset.key = d.key;
    const h = el("h3", "GPU " + d.gpu);
    h.appendChild(el("small", d.model + (d.mig ? " " + d.mig.profile : "")));
    art.appendChild(h);
    const dl = el("dl");
    for (const [f, label] of tileRows(d)) {
      dl.appendChild(el("dt", label));
      const dd = el("dd");
      dd.dataset.f = f;
      dl.appendChild(dd);
    }
    art.appendChild(dl);
    const chart = el("div", undefined, "chart");
    chart.setAttribute("aria-hidden", "true");
    art.appendChild(chart);
    const key = el("p", undefined, "key");
    key.appendChild(el("span", "utilization", "k-util"));
    key.appendChild(el("span", "memory", "k-mem"));
    key.appendChild(document.createTextNode(" · last 5 min"));
    art.appendChild(key);
    return art;
  }

  function drawTiles(devices) {
    const box = document.getElementById("gpus");
    const byKey = new Map();
    for (const a of box.querySelectorAll("article")) byKey.set(a.dataset.key, a);
    const keep = new Set();
    devices.forEach((d, i) => {
      let art = byKey.get(d.key);
      if (!art) art = newTile(d);
      if (box.children[i] !== art) box.insertBefore(art, box.children[i] || null);
      art.className = "tile " + d.sharing;
      for (const [f, , text] of tileRows(d)) {
        const dd = art.querySelector('dd[data-f="' + f + '"]');
        if (dd && dd.textContent !== text) dd.textContent = text;
      }
      keep.add(d.key);
    });
    for (const [key, art] of byKey) {
      if (!keep.has(key)) {
        art.remove();
        history.delete(key);
        const c = charts.get(key);
        if (c) c.destroy();
        charts.delete(key);
      }
    }
    for (const p of box.querySelectorAll(":scope > p")) p.remove();
  }

  function podCells(p) {
    return [p.namespace, p.pod, p.container, p.gpus.join(","), gib(p.memory_used_bytes),
      percent(p.utilization_ratio)];
  }

  // busiest first, unknown last, then by name: the order page.py's sorted_pods gives
  function byUse(a, b) {
    const ua = a.utilization_ratio === null ? -1 : a.utilization_ratio;
    const ub = b.utilization_ratio === null ? -1 : b.utilization_ratio;
    if (ua !== ub) return ub - ua;
    for (const k of ["namespace", "pod", "container"]) {
      if (a[k] !== b[k]) return a[k] < b[k] ? -1 : 1;
    }
    return 0;
  }

  function drawPods(pods) {
    const tbody = document.querySelector("#pods tbody");
    const frag = document.createDocumentFragment();
    for (const p of pods.slice().sort(byUse)) {
      const tr = el("tr", undefined, p.idle ? "idle" : "");
      for (const c of podCells(p)) tr.appendChild(el("td", c));
      frag.appendChild(tr);
    }
    tbody.replaceChildren(frag);
    const none = document.getElementById("nopods");
    if (none) none.hidden = pods.length > 0;
  }

  function remember(v) {
    for (const d of v.devices) {
      let h = history.get(d.key);
      if (!h) history.set(d.key, (h = { t: [], util: [], mem: [] }));
      if (h.t.length && h.t[h.t.length - 1] >= v.taken_at) continue;
      h.t.push(v.taken_at);
      h.util.push(d.utilization_ratio === null ? null : d.utilization_ratio * 100);
      const total = d.memory_total_bytes;
      h.mem.push(total && d.memory_used_bytes !== null ? (100 * d.memory_used_bytes) / total : null);
      while (h.t.length && h.t[0] < v.taken_at - WINDOW_S) {
        h.t.shift();
        h.util.shift();
        h.mem.shift();
      }
    }
  }

  function drawCharts() {
    if (typeof uPlot === "undefined") return;
    for (const art of document.querySelectorAll("#gpus article")) {
      const key = art.dataset.key;
      const h = history.get(key);
      const box = art.querySelector(".chart");
      if (!h || !box) continue;
      const data = [h.t, h.util, h.mem];
      const width = Math.max(120, box.clientWidth);
      let c = charts.get(key);
      if (!c) {
        c = new uPlot({
          width: width, height: 90, legend: { show: false }, cursor: { show: false },
          scales: { y: { range: [0, 100] } },
          axes: [{ size: 24, font: "10px system-ui" }, { size: 42, font: "10px system-ui",
            values: (u, ticks) => ticks.map((t) => t + "%") }],
          series: [{}, { label: "utilization %", stroke: "#1b9e5a", width: 1.5, points: { show: false } },
            { label: "memory %", stroke: "#3366cc", width: 1.5, points: { show: false } }],
        }, data, box);
        charts.set(key, c);
      } else {
        if (Math.abs(c.width - width) > 2) c.setSize({ width: width, height: 90 });
        c.setData(data);
      }
    }
  }

  function showStatus(text, cls) {
    const s = document.getElementById("status");
    s.textContent = text;
    s.className = cls;
  }

  function draw(v) {
    if (v.taken_at !== lastTaken) {
      lastTaken = v.taken_at;
      lastChange = Date.now();
    }
    const stale = Date.now() - lastChange > (3 * interval + 2) * 1000;
    showStatus(statusLine(v) + (stale ? " · STALE: no new cycle" : ""),
      stale ? "degraded" : v.health.status);
    drawTiles(v.devices);
    drawPods(v.pods);
    remember(v);
    drawCharts();
    body.dataset.cycle = String(v.cycle);
  }

  async function tick() {
    try {
      const r = await fetch("./api/v1/snapshot", { cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      draw(await r.json());
    } catch (e) {
      showStatus("podgpu unreachable: " + e.message + " (retrying)", "degraded");
    }
    setTimeout(tick, interval * 1000);
  }

  tick();
})();
