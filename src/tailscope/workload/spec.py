"""What one request of a workload asks for: the contract between workload/, runner/ and sim/."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send (bench) or simulate (sim).

    Attributes:
        id: unique within the run, in schedule order.
        request_class: the workload class name (``default`` without a profile).
        input_tokens: prompt tokens to synthesize. For a session turn > 0 this is the *new* user text only; the
            conversation history (previous prompts and responses) is carried in front of it.
        output_tokens: ``max_tokens`` asked for (with ``ignore_eos`` the server should produce exactly this many).
        at_ns: open-loop intended send time in ns since run start; ``None`` in closed loop (sent when a slot frees).
            For session turns > 0 it is ``None``: the turn is due ``think_time_ns`` after the previous response.
        prefix_id: which shared-prefix variant starts the prompt (``None`` = no shared prefix).
        prefix_tokens: length of that shared prefix in tokens (included in ``input_tokens``).
        session_id: conversation id for multi-turn sessions, else ``None``.
        turn: 0-based turn number within the session.
        think_time_ns: user think time before this turn (turn > 0).
        warmup: excluded from statistics (still sent and stored).
        seed: per-request seed for prompt synthesis (prompts differ per request).
        prompt: real prompt text to send instead of a synthesized one (datasets); ``input_tokens`` is then its
            estimated length.
        messages: a whole chat to send verbatim, as ``(role, content)`` pairs (datasets).
        trace_id: W3C trace id (32 lowercase hex digits) sent in ``traceparent``, or ``None`` (not traced).
        span_id: the client span id (16 hex digits) that ``traceparent`` names as the server's parent.
        after: a call graph (trace → load): ``(request id, gap ns)`` pairs of earlier requests of the same session;
            this request is due ``gap`` after the latest of their ends. Empty for ordinary requests and turns.
        priority: its class's scheduling priority (lower first; the simulator's replicas admit by it, then FCFS).
        step: an agent session's step name (``research/search``; :mod:`tailscope.workload.agent`), else ``None``.
            A session whose calls carry a step is run as a call graph (``after``), never as a conversation.
        answers_from: ids of earlier requests of the same session whose answer text is put into this request's
            prompt when it is sent (the prompt is built at dispatch time; ``input_tokens`` is the text before them).
        prompt_template: where those answers go (:mod:`tailscope.workload.answer_template`); None = after the
            request's own text.
        session_calls: an agent session's calls as drawn, on each of its calls (``stop.requests`` may cut the stream
            before the last ones: the session is then incomplete, not complete with fewer calls); else ``None``.
    """

    id: int
    input_tokens: int
    output_tokens: int
    at_ns: int | None = None
    request_class: str = "default"
    prefix_id: int | None = None
    prefix_tokens: int = 0
    session_id: str | None = None
    turn: int | None = None
    think_time_ns: int = 0
    warmup: bool = False
    seed: int = 0
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    trace_id: str | None = None
    span_id: str | None = None
    after: tuple[tuple[int, int], ...] = ()
    priority: int = 0
    step: str | None = None
    answers_from: tuple[int, ...] = ()
    session_calls: int | None = None
    prompt_template: str | None = None
