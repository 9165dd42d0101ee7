"""Running a session once its first request is due: a conversation's later turns (think time, growing history)
and a call graph's calls (each waits for the calls in its ``after``, then its gap; answers placed into prompts).
"""

from __future__ import annotations

import asyncio

from tailscope.client.openai import Outcome
from tailscope.runner.sender import Prepared, Sender
from tailscope.workload.answer_template import ANSWER_SEP, parse_template
from tailscope.workload.spec import RequestSpec

__all__ = ["SessionDispatch"]


class SessionDispatch(Sender):
    """Sessions and call graphs over :class:`~tailscope.runner.sender.Sender`."""

    async def _run_prepared(self, prep: Prepared, scheduled: int) -> None:
        """Send a request, then (for a session) its later turns with think time and growing history."""
        spec = prep.spec
        if spec.session_id is None:
            await self._send(spec, prep.prompt, scheduled, spec.input_tokens)
            return
        if spec.step is not None or any(t.after or t.at_ns is not None for t in prep.followups):
            await self._run_graph(prep, scheduled)
            return
        # Only turn 0 is built with the shared prefix (the workload contract); later turns carry it inside their
        # history, so they still start with it and are marked shared, and the prefix is never sent twice.
        shared = spec.prefix_id is not None
        history: list[dict[str, str]] = (
            list(prep.prompt) if isinstance(prep.prompt, list) else [{"role": "user", "content": prep.prompt}]
        )
        out = await self._send(spec, list(history), scheduled, spec.input_tokens)
        context = spec.input_tokens  # the conversation so far, in (synthesized) tokens
        for turn in prep.followups:
            if not out.record.ok or self._stop.is_set():
                return
            history.append({"role": "assistant", "content": out.text})
            text = turn.prompt if turn.prompt is not None else self.synth.make(turn.input_tokens, turn.seed)
            history.append({"role": "user", "content": text})
            context += (out.record.output_tokens or 0) + turn.input_tokens
            prev_end = out.record.end_ns if out.record.end_ns is not None else self._now_rel()
            due = prev_end + turn.think_time_ns
            if not await self._sleep_until(due):
                return
            out = await self._send(turn, list(history), due, context, shared_prefix=shared)

    async def _run_graph(self, prep: Prepared, scheduled: int) -> None:
        """A session shaped as a call graph (trace → load, agent profiles): each call waits for the calls in its
        ``after``, then for its gap after the latest of their ends (or, depending on none, for its own ``at_ns``);
        calls with no path between them run concurrently. A call whose dependency failed (or was never sent) is not
        sent. A call with ``answers_from`` gets those calls' answer text when it is sent: after its own, or where its
        ``prompt_template`` says."""
        ends: dict[int, asyncio.Future[int | None]] = {}
        answers: dict[int, Outcome] = {}
        loop = asyncio.get_running_loop()
        for s in (prep.spec, *prep.followups):
            ends[s.id] = loop.create_future()
        if prep.spec.step is not None and not prep.spec.warmup and prep.spec.session_id is not None:
            # as drawn: a session the stream's request count cut is incomplete
            self.planned[prep.spec.session_id] = max(1 + len(prep.followups), prep.spec.session_calls or 0)

        async def call(spec: RequestSpec, due: int | None, prompt: str | list[dict[str, str]]) -> None:
            end: int | None = None
            try:
                if due is None:
                    due_at = spec.at_ns
                    for dep, gap in spec.after:
                        dep_end = await ends[dep] if dep in ends else None
                        if dep_end is None:
                            return
                        due_at = dep_end + gap if due_at is None else max(due_at, dep_end + gap)
                    due = due_at if due_at is not None else scheduled  # a first step's branch: the session's start
                    if not await self._sleep_until(due):
                        return
                hint = spec.input_tokens
                if spec.answers_from and isinstance(prompt, str):
                    prompt, hint = self._with_answers(spec, prompt, [answers[a] for a in spec.answers_from])
                if spec.step is not None:
                    self.step_names[spec.id] = spec.step
                out = await self._send(spec, prompt, due, hint)
                if out.record.ok:
                    r = out.record
                    end = r.stream_end_ns or r.end_ns or self._now_rel()
                    answers[spec.id] = out
            finally:
                fut = ends[spec.id]
                if not fut.done():
                    fut.set_result(end)

        tasks = [call(prep.spec, scheduled, prep.prompt)]
        for turn in prep.followups:
            text = turn.prompt
            if text is None:
                text = self.synth.make(
                    turn.input_tokens, turn.seed, prefix_id=turn.prefix_id, prefix_tokens=turn.prefix_tokens
                )
            tasks.append(call(turn, None, text))
        await asyncio.gather(*tasks)

    def _with_answers(self, spec: RequestSpec, prompt: str, outs: list[Outcome]) -> tuple[str, int]:
        """The prompt with the answers placed (after it, one paragraph each, or where ``spec.prompt_template`` says,
        a shared prefix staying in front), and its length in tokens: counted with the tokenizer when one is loaded,
        else from the planned lengths and each answer's output tokens (the server's own prompt count, when it
        reports usage, is what the record keeps)."""
        texts = [o.text for o in outs]
        sizes = [o.record.output_tokens or len(o.text.split()) for o in outs]
        if spec.prompt_template is None:
            text = ANSWER_SEP.join([prompt, *texts])
            estimate = spec.input_tokens + sum(sizes)
        else:
            head, own, n_head = "", prompt, 0
            if spec.prefix_id is not None and spec.prefix_tokens > 0:
                pre = self.synth.prefix(spec.prefix_id, min(spec.prefix_tokens, spec.input_tokens))
                if prompt.startswith(pre):  # the agent's system prompt stays first (a prefix-cache hit)
                    head, own, n_head = pre + " ", prompt[len(pre) :].lstrip(" "), spec.prefix_tokens
            tmpl = parse_template(spec.prompt_template)
            text = head + tmpl.render(own, texts)
            estimate = n_head + tmpl.tokens(spec.input_tokens - n_head, sizes)
        counted = self.synth.count(text)
        return text, counted if counted is not None else estimate
