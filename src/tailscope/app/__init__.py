"""The reference AI application (``tailscope app``): gateway → retrieval → agent → inference → business, real spans.

Orchestration: ``server.py`` (HTTP service and lifecycle), ``pipeline.py`` (the layers), ``inference.py`` (model
calls, built-in engines), ``business.py`` (SQLite pool), ``tracing.py`` (OpenTelemetry spans), ``presets.py`` (finding
a preset by name), ``options.py`` (how an instance runs: host, port, time scale, seed, …). The preset model and the
fixes are pure (``workload/app_preset.py``); preset files are read in ``io/app_preset.py``.
"""
