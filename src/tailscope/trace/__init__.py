"""Trace analysis: latency is a tree.

Pure modules (no IO): :mod:`~tailscope.trace.tree` (span trees with orphans, cycles, multiple roots and clock skew made
explicit), :mod:`~tailscope.trace.critical_path` (the ``default`` and ``jaeger`` policies),
:mod:`~tailscope.trace.layers` (layer classifier), :mod:`~tailscope.trace.facts` (per-trace facts),
:mod:`~tailscope.trace.waterfall`, :mod:`~tailscope.trace.analysis` (set analyses),
:mod:`~tailscope.trace.whatif` (re-timing under changes), :mod:`~tailscope.trace.dependency`,
:mod:`~tailscope.trace.rank`, :mod:`~tailscope.trace.diff` and :mod:`~tailscope.trace.demo` (synthetic traces).
Parsers and IO live in :mod:`tailscope.trace.ingest`; the OTLP/HTTP receiver in :mod:`tailscope.trace.receiver`.
``docs/trace.md`` states the methods precisely.
"""
