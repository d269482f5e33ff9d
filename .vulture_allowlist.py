"""Names vulture reports as unused in src/ that are used, reviewed one by one.

scripts/check runs `vulture src/ .vulture_allowlist.py` (the generated gRPC stubs excluded): a
function, class, attribute or constant nothing in src/ uses fails it, including one that only
tests call. A new entry here says why the name is not dead; delete the code instead when it is.
"""
# ruff: noqa: B018 -- each line names an attribute for vulture: the bare expression is the point

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# ctypes structure fields: NVML reads them (backends/nvml_gpm.py's GPM metrics request)
_.numMetrics
_.sample1
_.sample2
_.metricId

# google-re2's Options, set for RE2 to read (re2compat._options)
_.log_errors
_.max_mem

# asyncio Protocol / BufferedProtocol callbacks: the event loop calls them (http/conn.py)
_.connection_made
_.get_buffer
_.sizehint
_.buffer_updated
_.eof_received
_.connection_lost
_.pause_writing
_.resume_writing

# TypedDict keys of the live view's document (sinks/live/schema.py): read by live.js and `top`
_.utilization_ratio
_.memory_used_bytes
_.memory_total_bytes
_.power_watts
_.temperature_celsius

# NVML's return codes are a table restated from nvml.h, kept whole (backends/nvml_lib.py)
_.SUCCESS
_.TIMEOUT

# the vendored uPlot's version, which http/static/VENDORED.md and its test hold equal
_.UPLOT_VERSION

# Counters and state that tests read to count events instead of waiting on a clock:
_.changes  # fields/listfollow.py: reloads of the metric list
_.available  # attribution/podwatch.py: the watch has API access at all
_.has_token  # http/authcheck.py: the failure bucket
_.in_flight  # http/authcheck.py: checks queued or running
_.trims  # http/budget.py: memory hand-backs after a wave of closes (tests/unit/http/test_guard_states.py)

# A field of `podgpu plan`'s Container Insights estimate, beside the dollars it prices
_.observations_per_minute
