"""`python -m deploy.gen.write rules|dashboard DIR`: write the generated files into DIR."""

from __future__ import annotations

import sys
from pathlib import Path


def files(kind: str) -> dict[str, str]:
    """Relative path -> content of every generated file of `kind`."""
    if kind == "rules":
        from deploy.gen import accounting, accounting_tests, rules, ruletests

        return {"podgpu.rules.yml": rules.render_plain(),
                "podgpu-rules.yaml": rules.render_prometheusrule(),
                "tests/podgpu.rules.test.yml": ruletests.render(),
                "podgpu-accounting.rules.yml": accounting.render_plain(),
                "podgpu-accounting-rules.yaml": accounting.render_prometheusrule(),
                "tests/podgpu-accounting.rules.test.yml": accounting_tests.render(),
                "podgpu-opencost.rules.yml": accounting.render_opencost(),
                "tests/podgpu-opencost.rules.test.yml": accounting_tests.render_opencost()}
    if kind == "dashboard":
        from deploy.gen import dashboard

        body = dashboard.render_json()
        return {"podgpu-dashboard.json": body,
                "podgpu-dashboard-configmap.yaml": dashboard.render_configmap(body)}
    raise SystemExit(f"deploy.gen.write: unknown kind {kind!r}; expected rules or dashboard")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    for rel, text in files(argv[0]).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
