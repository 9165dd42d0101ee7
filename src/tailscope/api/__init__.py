"""The public library, one module per family (measure, simulate, twin, trace, verify, plan, runs).

Import from :mod:`tailscope` itself (``tailscope.bench``, ``tailscope.BenchOptions`` …): the names are re-exported
there. Every function here writes a store only when given one, installs signal handlers only when asked, and raises
only :class:`~tailscope.errors.TailscopeError` subclasses.
"""
