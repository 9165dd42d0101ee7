"""Trace sets with a known true effect: before and after built from the same random draws, the only difference the
change (applied while generating, by plain arithmetic, not by the re-timing engine).

Each trace (the method's case study, shrunk): ``POST /chat`` (gateway) runs ``auth`` synchronously, then, together,
``invoke_agent`` and a ``memory fetch`` branch (sometimes the slower one). The agent plans (``llm plan``), runs three
searches one after another in a random order (``search_a``/``_b``/``_c``, each with a tool call id), a ``rerank``
that links to the three searches and names their tool call ids (it consumes their results), and answers
(``llm answer``, retried after an error in a fifth of the traces).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tailscope.records import Span

MS = 1_000_000
SEARCHES = ("search_a", "search_b", "search_c")
TOOL = {"gen_ai.operation.name": "execute_tool"}  # attributes that classify the spans the same way on ingest
LLM = {"gen_ai.operation.name": "chat"}


@dataclass(frozen=True)
class Draws:
    auth: float
    plan: float
    search: dict[str, float]
    order: tuple[str, ...]
    rerank: float
    retry: float | None  # the failed first attempt's duration, when there is one
    answer: float
    memory: float
    hit_b: float  # uniform draw for the search_b cache


def draw(rng: random.Random) -> Draws:
    def ln(median: float, sigma: float = 0.4) -> float:
        return rng.lognormvariate(0.0, sigma) * median

    order = list(SEARCHES)
    rng.shuffle(order)
    return Draws(
        auth=ln(150, 0.5),
        plan=ln(400),
        search={"search_a": ln(300), "search_b": ln(500, 0.6), "search_c": ln(200)},
        order=tuple(order),
        rerank=ln(100),
        retry=ln(300) if rng.random() < 0.2 else None,
        answer=ln(800, 0.5),
        memory=ln(1400, 0.5),
        hit_b=rng.random(),
    )


def build(tid: str, d: Draws, change: str = "") -> list[Span]:
    """One trace's spans (ms floats → ns), with ``change`` (a set of names below, comma-separated) applied."""
    ch = set(change.split(",")) if change else set()
    spans: list[Span] = []
    n = [0]

    def add(parent: str | None, name: str, start: float, dur: float, **kw: object) -> str:
        n[0] += 1
        sid = f"{tid[-6:]}{n[0]:010x}"
        spans.append(Span(tid, sid, parent, name, round(start * MS), round((start + dur) * MS), **kw))  # type: ignore[arg-type]
        return sid

    root = f"{tid[-6:]}{0:010x}"
    t = 0.5
    auth = 30.0 if "auth30" in ch else d.auth
    add(root, "auth", t, auth, service="gateway")
    t += auth + 0.5
    branch = t
    # agent
    a0 = t
    t += 2.0
    add_agent: list[tuple[str, float, float, dict[str, object]]] = []
    add_agent.append(("llm plan", t, d.plan, {"attributes": LLM, "layer": "inference"}))
    t += d.plan + 1.0
    first = t
    ends = []
    for k, name in enumerate(d.order):
        dur = d.search[name]
        if name == "search_b" and "cache_b" in ch and d.hit_b < 0.4:
            dur = 2.0
        if name == "search_b" and "timeout_b" in ch and dur > 400:
            dur = 450.0
        start = first if "parallel" in ch else t
        add_agent.append(
            (name, start, dur, {"layer": "agent", "attributes": {**TOOL, "gen_ai.tool.call.id": f"call_{tid}_{k}"}})
        )
        ends.append(start + dur)
        t = start + dur + 0.5
    t = max(ends) + 0.5
    add_agent.append(
        (
            "rerank",
            t,
            d.rerank,
            {
                "layer": "agent",
                "consumes": True,
                "attributes": {**TOOL, "input.value": " ".join(f"call_{tid}_{k}" for k in range(3))},
            },
        )
    )
    t += d.rerank + 0.5
    if d.retry is not None:
        add_agent.append(
            (
                "llm answer",
                t,
                d.retry * (0.6 if "scale" in ch else 1.0),
                {"attributes": LLM, "layer": "inference", "status": "ERROR"},
            )
        )
        t += d.retry * (0.6 if "scale" in ch else 1.0) + 0.5
        if "cap" not in ch:
            add_agent.append(
                ("llm answer", t, d.answer * (0.6 if "scale" in ch else 1.0), {"attributes": LLM, "layer": "inference"})
            )
            t += d.answer * (0.6 if "scale" in ch else 1.0)
    else:
        add_agent.append(
            ("llm answer", t, d.answer * (0.6 if "scale" in ch else 1.0), {"attributes": LLM, "layer": "inference"})
        )
        t += d.answer * (0.6 if "scale" in ch else 1.0)
    if "pchildren" in ch:  # every child of the agent starts when its first child did
        add_agent = [(name, a0 + 2.0, dur, kw) for name, _, dur, kw in add_agent]
        t = max(a0 + 2.0 + dur for _, _, dur, _ in add_agent)
    t += 1.0
    agent = add(root, "invoke_agent", a0, t - a0, service="agent", layer="agent")
    search_ids: list[str] = []
    for name, start, dur, kw in add_agent:
        consumes = kw.pop("consumes", False)
        links = tuple((tid, s) for s in search_ids) if consumes else ()
        sid = add(agent, name, start, dur, service="agent", links=links, **kw)
        if name in SEARCHES:
            search_ids.append(sid)
    end = t
    if "remove_memory" not in ch:
        add(root, "memory fetch", branch, d.memory, service="memory", kind="CLIENT", layer="retrieval")
        end = max(end, branch + d.memory)
    end += 1.5
    spans.append(Span(tid, root, None, "POST /chat", 0, round(end * MS), service="gateway", kind="SERVER",
                      layer="gateway"))  # fmt: skip
    return spans


def trace_sets(n: int, change: str, *, seed: int = 11) -> tuple[list[list[Span]], list[list[Span]]]:
    """``n`` traces before and after ``change`` from the same draws."""
    rng = random.Random(seed)
    before, after = [], []
    for k in range(n):
        d = draw(rng)
        tid = f"{k + 1:032x}"
        before.append(build(tid, d))
        after.append(build(tid, d, change))
    return before, after
