"""tailscope.serve: the built-in OpenAI-compatible server driven by the engine model on the wall clock.

Modules: ``app`` (aiohttp routes and handlers), ``loop`` (the engine loop on absolute deadlines), ``streaming``
(SSE writing, fast path and fault path), ``frontend`` (API-server latency as sim models it), ``protocol`` (request
validation, OpenAI errors), ``sse`` (response bodies), ``tokenizer`` (deterministic tokens, chat template, block
hashes, filler text), ``metrics`` (vLLM-named Prometheus text), ``faults`` (seeded fault injection),
``engine_factory`` (model + GPU → replica), ``embedded`` and ``child`` (the bench's built-in target in a thread or a
child process), ``server`` (foreground serving for the CLI), ``site`` (start a listener and learn its bound
port; the proxy, the reference app and the test servers use it too; SIGINT/SIGTERM: ``tailscope.signals``).
See ``docs/serve.md``.
"""
