"""Pure metric derivations: per-request values, percentiles, SLOs and run summaries (no IO)."""
