"""The request stream entering a simulation: the next request, sessions' turns, the block hashes that make shared
prefixes and earlier turns prefix-cache hits, and the closed-loop clients.

* Open loop: a request is due at ``spec.at_ns``.
* Closed loop (``at_ns`` None): ``concurrency`` virtual clients each start their next request when the previous
  one ends; a client runs a whole session (turn k+1 is due ``think_time_ns`` after turn k ends).
* Sessions: turn k+1's prompt = history (all earlier prompts and outputs) + its new text; its block hashes extend
  the session's chain, so the previous turn's KV blocks are prefix-cache hits if they were not evicted.
* Shared prefixes: ``prefix_id``/``prefix_tokens`` become the same leading block hashes for every request of that
  variant.
* Call graphs (``call_graphs.py``): a call's prompt is its own text plus the output tokens of its ``answers_from``
  calls (placed after its text, so they are never a prefix-cache hit); a shared prefix stays in front of every call.
  With a ``prompt_template`` the prompt is as long as the template renders
  (:meth:`~tailscope.workload.answer_template.AnswerTemplate.tokens`: each placeholder's tokens, the literal text at
  one token per word, as bench counts it without a tokenizer).
"""

from __future__ import annotations

import zlib

from tailscope.engine.kv_cache import chain_hash, extend_hashes
from tailscope.sim.call_graphs import CallGraphs
from tailscope.sim.events import ROUTE, SPEC_DUE
from tailscope.sim.state import LiveRequest, SessionState
from tailscope.workload.answer_template import parse_template
from tailscope.workload.spec import RequestSpec

__all__ = ["Clients"]

_PREFIX_SEED = 0x7A11_5C0E


class Clients(CallGraphs):
    """Where requests come from and what happens after one ends (sessions, call graphs, the client's next move)."""

    def _next_unit(self) -> RequestSpec | None:
        """Next turn-0/single spec; its later session turns are queued on the session."""
        while True:
            spec: RequestSpec | None = self._peek
            self._peek = None
            if spec is None:
                spec = next(self._specs, None)
                if spec is None:
                    self._exhausted = True
                    return None
            if spec.session_id is not None and (spec.turn or 0) > 0:
                ses = self._sessions.get(spec.session_id)
                if ses is not None:
                    ses.turns.append(spec)
                continue  # a stray later turn (its turn 0 unseen) is dropped
            if spec.session_id is not None:
                ses = SessionState(chain=[])
                self._sessions[spec.session_id] = ses
                nxt = next(self._specs, None)
                while nxt is not None and nxt.session_id == spec.session_id and (nxt.turn or 0) > 0:
                    ses.turns.append(nxt)
                    nxt = next(self._specs, None)
                self._peek = nxt
                if nxt is None:
                    self._exhausted = True
                ses.call_graph = spec.step is not None or any(t.after or t.at_ns is not None for t in ses.turns)
            return spec

    def _hashes(self, spec: RequestSpec, prompt: int) -> tuple[int, ...]:
        if spec.session_id is None and spec.prefix_id is None:
            return ()  # unique content: the engine tracks it without hashes
        bs = self._block
        full = prompt // bs
        if full == 0:
            return ()
        ses = self._sessions.get(spec.session_id) if spec.session_id is not None else None
        if ses is not None and ses.call_graph:
            ses = None  # a call's own text is unique to it: only a shared prefix is common
        if ses is not None and ses.chain:
            extend_hashes(ses.chain, full, 0)
            return tuple(ses.chain[:full])
        chain: list[int] = []
        n_prefix = min(spec.prefix_tokens, prompt) // bs if spec.prefix_id is not None else 0
        if n_prefix:
            pc = self._prefix_chains.setdefault(spec.prefix_id or 0, [chain_hash(_PREFIX_SEED, spec.prefix_id or 0)])
            extend_hashes(pc, n_prefix, 0)
            chain = pc[:n_prefix]
        if ses is None:
            return tuple(chain)  # the shared prefix only; the rest is unique to the request
        if full > len(chain):
            key = zlib.crc32(spec.session_id.encode()) if spec.session_id is not None else spec.id
            own = ((key << 20) ^ spec.seed ^ (1 << 62)) if spec.session_id is None else (key | (1 << 61))
            chain.append(chain_hash(chain[-1] if chain else _PREFIX_SEED, own))
            extend_hashes(chain, full, 0)
        if ses is not None:
            ses.chain = chain
        return tuple(chain)

    def _start(self, spec: RequestSpec, now: int, client: int) -> None:
        """The request is due at ``now``: route it, then it passes the replica's API server."""
        prompt = spec.input_tokens
        ses = self._sessions.get(spec.session_id) if spec.session_id is not None else None
        if ses is not None:
            ses.client = client
            if ses.call_graph:
                g = ses.graph
                if g is None:
                    g = ses.graph = self._graph_start(ses, spec, now, client)
                elif self._stop_ns is not None and now >= self._stop_ns:
                    # the run's stop: no call is sent after it (the session is cut: incomplete), as in bench
                    self._graph_end(ses, g, spec, now, None, 0)
                    if g.left == 0:
                        del self._sessions[spec.session_id]  # type: ignore[arg-type]
                        if client >= 0:
                            self._client_next(client, now)
                    return
                elif spec.answers_from:  # the answers' text: after the call's own, or where its template says
                    sizes = [g.outputs.get(a, 0) for a in spec.answers_from]
                    if spec.prompt_template is None:
                        prompt += sum(sizes)
                    else:
                        n_head = spec.prefix_tokens if spec.prefix_id is not None else 0
                        prompt = n_head + parse_template(spec.prompt_template).tokens(prompt - n_head, sizes)
                if spec.step is not None:
                    self.step_names[spec.id] = spec.step
            else:
                prompt += ses.history
        live = LiveRequest(spec, now, prompt, -1, client)
        if spec.session_id is not None or spec.prefix_id is not None:
            live.hashes = self._hashes(spec, prompt)
        self._live[spec.id] = live
        if client < 0 and self._send_lag is not None:
            lag = self._send_lag(spec.seed, spec.id)
            if lag > 0:  # the measuring client sends it this late; latency still counts from the intended time
                live.sent_ns = now + lag
                self._push(now + lag, ROUTE, spec.id)
                return
        self._route_live(live, now)

    def _client_next(self, client: int, now: int) -> None:
        """A closed-loop client is free at ``now``: start its next request (if the run goes on)."""
        if self._stop_ns is not None and now >= self._stop_ns:
            self._exhausted = True  # an endless closed-loop stream stops here
            return
        spec = self._next_unit()
        if spec is not None:
            self._start(spec, now, client)

    def _after_request(self, live: LiveRequest, now: int, output: int = 0, end: int | None = None) -> None:
        """Session bookkeeping and the closed-loop client's next move (``end``: the last token's time; None when
        the request failed)."""
        spec = live.spec
        ses = self._sessions.get(spec.session_id) if spec.session_id is not None else None
        if ses is not None and ses.graph is not None:
            g = ses.graph
            self._graph_end(ses, g, spec, now, end, output)
            if g.left > 0:
                return
            del self._sessions[spec.session_id]  # type: ignore[arg-type]
        elif ses is not None:
            ses.history = live.prompt + output
            if ses.turns:
                nxt = ses.turns.popleft()
                self._push(now + nxt.think_time_ns, SPEC_DUE, (nxt, live.client))
                return
            del self._sessions[spec.session_id]  # type: ignore[arg-type]
        if live.client >= 0:
            if self._gap is not None and end is not None:
                # the client's own delay before its next request: the request is scheduled (and routed) for
                # ``now + gap`` at once rather than through an event of its own — a third of the closed loop's events
                # otherwise; its routing sees the replicas' load a few ms early (and a twin's serial front end may
                # take it in ahead of a request due within those ms), which nothing measurable depends on
                self._client_next(live.client, now + self._gap())
                return
            self._client_next(live.client, now)

    def _lifetime_ns(self, spec: RequestSpec, n: int) -> int:
        """Rough lifetime of ``spec`` among ``n`` clients in steady state: each decode step also carries the
        prefill of the requests that replace finished ones (``n × input / output`` tokens per step)."""
        perf = self._perf
        isl, osl = spec.input_tokens, max(spec.output_tokens, 1)
        per_step = min(n * isl // osl, self.cluster.engine_config().max_num_batched_tokens)
        ctx = n * (isl + osl // 2)
        prefill = [(per_step, isl // 2)] if per_step else []
        step = perf.step_ns(prefill, n, ctx)
        return perf.tokenize_ns(isl) + perf.frontend_delay_ns(n) + perf.step_ns([(isl, 0)], 0, 0) + osl * step
