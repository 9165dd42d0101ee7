"""A fault-injecting proxy as a library: put it in front of any dependency, inject latency, errors, resets, stalls,
bandwidth limits or a black hole, and change the rules live::

    async with tailscope.start_proxy(to="http://127.0.0.1:8000", rules=[{"name": "slow", "latency": {"ms": 200}}])
            as proxy:
        result = await tailscope.bench_async(url=proxy.url, rate=4, duration=10)
        proxy.set_rules([{"name": "errors", "share": 0.1, "error": {"status": 503}}])

:func:`run_proxy` serves in the foreground until interrupted or ``duration`` passes (``tailscope proxy``). The admin
API (``GET/POST/PUT/DELETE /rules`` on ``admin_url``) is what ``tailscope drill`` drives for a ``kind: proxy`` fault.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tailscope.api._support import Listener, public, serve_until_stopped, sync_twin
from tailscope.io.proxy_rules import ProxyRule, load_rules, rules_from_json
from tailscope.serve.proxy import FaultProxy

RuleSpec = ProxyRule | Mapping[str, Any]


def _rules(rules: Sequence[RuleSpec]) -> list[ProxyRule]:
    out: list[ProxyRule] = []
    for i, r in enumerate(rules):
        out += [r] if isinstance(r, ProxyRule) else rules_from_json(dict(r), source=f"rules[{i}]")
    return out


class ProxyServer(Listener):
    """A running proxy (``async with``, or :meth:`start` / :meth:`stop`).

    Attributes:
        url: where clients connect (``http://HOST:PORT``; ``tcp://HOST:PORT`` in TCP mode) once started.
        admin_url: the admin API (``GET/POST/PUT/DELETE /rules``); empty when started without one.
    """

    def __init__(self, proxy: FaultProxy) -> None:
        self._proxy = proxy
        self.url = ""
        self.admin_url = ""

    async def start(self) -> str:
        """Bind the proxy and its admin API; returns :attr:`url`.

        Raises:
            TargetError: a port is taken.
        """
        self.url = await self._proxy.start()
        self.admin_url = self._proxy.admin_url
        return self.url

    async def stop(self) -> None:
        await self._proxy.stop()

    @property
    def rules(self) -> list[ProxyRule]:
        return list(self._proxy.rules)

    def set_rules(self, rules: Sequence[RuleSpec]) -> None:
        """Replace every rule (dicts in the file's shape, or :class:`~tailscope.io.proxy_rules.ProxyRule`).

        Raises:
            ConfigError: a bad rule (naming the field).
        """
        self._proxy.set_rules(_rules(rules))

    def add_rules(self, rules: Sequence[RuleSpec]) -> None:
        """Add rules (one named like an existing rule replaces it)."""
        self._proxy.add_rules(_rules(rules))

    def clear_rules(self) -> None:
        self._proxy.set_rules([])

    @property
    def stats(self) -> dict[str, Any]:
        """Counters: requests, forwarded, delayed, errors_injected, resets, stalls, blackholed, throttled, by_rule."""
        return self._proxy.stats.to_dict()


@public
def start_proxy(
    *,
    to: str,
    port: int = 0,
    host: str = "127.0.0.1",
    admin_port: int | None = 0,
    rules: Sequence[RuleSpec] = (),
    rules_file: str | os.PathLike[str] | None = None,
    mode: str = "http",
    seed: int = 0,
) -> ProxyServer:
    """A fault-injecting proxy in front of ``to``, ready to start (``async with start_proxy(...) as proxy``).

    Args:
        to: the upstream: a URL (``http`` mode) or ``HOST:PORT`` (``tcp`` mode).
        port / host: where to listen (port 0: a free one; 127.0.0.1 by default).
        admin_port: the admin API's port (0: a free one; None: no admin API).
        rules: the rules at start (dicts in the file's shape, see ``docs/drills.md``, or ``ProxyRule``).
        rules_file: a rules YAML file (``rules: [...]``), added after ``rules``.
        mode: ``http`` (per request; statuses) or ``tcp`` (per connection; bytes).
        seed: seed of the shares' and latencies' draws.

    Raises:
        ConfigError: a bad rule, rules file (``file:line: field …``), mode or upstream.
    """
    all_rules = _rules(rules) + (load_rules(rules_file) if rules_file is not None else [])
    return ProxyServer(
        FaultProxy(to, host=host, port=port, admin_port=admin_port, rules=all_rules, mode=mode, seed=seed)
    )


@public
async def run_proxy_async(
    *,
    to: str,
    port: int = 0,
    host: str = "127.0.0.1",
    admin_port: int | None = 0,
    rules: Sequence[RuleSpec] = (),
    rules_file: str | os.PathLike[str] | None = None,
    mode: str = "http",
    seed: int = 0,
    duration: float | None = None,
    handle_signals: bool = False,
    on_ready: Callable[[ProxyServer], None] | None = None,
) -> dict[str, Any]:
    """Serve the proxy until ``duration`` passes, or (``handle_signals``) SIGINT/SIGTERM; returns its counters.
    Arguments as :func:`start_proxy`; ``on_ready`` is called once it listens."""
    server = start_proxy(
        to=to, port=port, host=host, admin_port=admin_port, rules=rules, rules_file=rules_file, mode=mode, seed=seed
    )
    await serve_until_stopped(server, duration=duration, handle_signals=handle_signals, on_ready=on_ready)
    return server.stats


run_proxy = sync_twin(run_proxy_async)
