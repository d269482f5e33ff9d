"""The commands' option tables and the settings they resolve to.

`serve` (serve.py: dcgm-exporter's flags), the options `serve` and `emf` share (emf.py), the
dcgm-exporter flags podgpu accepts without implementing them (compat.py) and the value parsers
(values.py). The engine that reads any table is podgpu.options; the settings are podgpu.settings.
"""

from podgpu.config.serve import (
    DEFAULT_ADDRESS,
    MAX_COLLECT_INTERVAL_MS,
    MAX_WINDOW_MS,
    MIN_COLLECT_INTERVAL_MS,
    OPTIONS,
    SERVE_OPTIONS,
    add_serve_arguments,
    parse_serve_args,
    serve_parser,
    settings_from,
)
from podgpu.options import Option, parse_bool
from podgpu.settings import DEFAULT_COLLECT_INTERVAL_MS, ServeSettings

__all__ = ["DEFAULT_ADDRESS", "DEFAULT_COLLECT_INTERVAL_MS", "MAX_COLLECT_INTERVAL_MS",
           "MAX_WINDOW_MS", "MIN_COLLECT_INTERVAL_MS", "OPTIONS", "SERVE_OPTIONS", "Option",
           "ServeSettings", "add_serve_arguments", "parse_bool", "parse_serve_args",
           "serve_parser", "settings_from"]
