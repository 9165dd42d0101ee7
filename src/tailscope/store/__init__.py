"""The embedded DuckDB store: runs, request records, server samples, spans; exports."""
