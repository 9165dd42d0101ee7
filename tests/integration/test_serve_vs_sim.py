"""serve (wall clock, real sockets) and sim (virtual time) run the same engine model: same workload, same latencies.

An open-loop schedule of token-id prompts (so prompt lengths are exact and no prefix is shared) is sent to the
built-in server by a client in its own process, and simulated with ``tailscope.sim`` on the same deployment.
Mean TTFT and mean TPOT must agree; they differ only by HTTP overhead, the per-request frontend jitter (seeded
differently) and host noise. TTFT is judged as the server saw it (from the request's receipt, so our own parsing,
tokenizing and frontend wait are in it): the client's TTFT adds the loopback transport and the client process's own
scheduling, host noise on a shared 2-core machine (alone ≈ 2 ms on the server's 74 ms; in one CI run with the soak
beside it, while the machine read "quiet", the client's mean was 87.9 ms against sim's 70.8). The client's figure is
printed and held to contain the server's, not judged.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.disagg import parse_disagg
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.sim.simulator import Simulation
from tailscope.testing.judgement import Judgement
from tailscope.workload.spec import RequestSpec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs one monotonic clock across processes"),
]

N, GAP_S, OUT = 30, 0.08, 64

CLIENT = r"""
import asyncio, json, sys, time
import aiohttp

URL, plan = sys.argv[1], json.loads(sys.stdin.read())

async def one(session, t0, at, prompt, out):
    await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
    sent = time.perf_counter_ns()
    body = {"prompt": prompt, "max_tokens": out, "ignore_eos": True, "stream": True}
    times = []
    async with session.post(URL + "/v1/completions", json=body) as r:
        async for line in r.content:
            if line.startswith(b"data: {"):
                times.append(time.perf_counter_ns())
    return sent, times

async def main():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter() + 0.05
        res = await asyncio.gather(*(one(session, t0, *p) for p in plan))
    print(json.dumps(res))

asyncio.run(main())
"""


def _stats(ttft_ms: list[float], tpot_ms: list[float]) -> tuple[float, float]:
    return sum(ttft_ms) / len(ttft_ms), sum(tpot_ms) / len(tpot_ms)


@pytest.mark.parametrize(
    ("disagg", "dp"),
    [(None, 1), ("prefill=1x1,decode=1x2:dp2", 1), (None, 2)],
    ids=["one replica", "disaggregated", "attention-DP ranks"],
)
def test_serve_latencies_match_sim(judgement: Judgement, disagg: str | None, dp: int) -> None:
    """One replica; (``serve --disagg``) prefill and decode pools: the prefill, the KV transfer, the decode worker's
    pickup and its first step; and (``serve --attention-dp 2``) one replica's two ranks, each with its own batch —
    on the wall clock as in the simulator."""
    rng = random.Random(7)
    lengths = [rng.randint(200, 1500) for _ in range(N)]
    plan = [(i * GAP_S, [rng.randrange(1000, 100_000) for _ in range(n)], OUT) for i, n in enumerate(lengths)]

    engine, options = build_replica("llama-3.1-8b", "h100-sxm", disagg=disagg, attention_dp=dp)
    with EmbeddedServer(engine, options) as srv:
        proc = subprocess.run(
            [sys.executable, "-c", CLIENT, srv.base_url],
            input=json.dumps(plan),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        # the server's own TTFT (receipt → first token released), its count, and its engine loop's worst lateness
        server_ttft_s, server_count, loop_lag_s = srv.call(
            lambda st: (st.metrics.ttft.total, st.metrics.ttft.count, st.metrics.loop_lag_max_s)
        )
    assert proc.returncode == 0, proc.stderr
    client_ttft, serve_tpot = [], []
    for sent, times in json.loads(proc.stdout):
        assert len(times) == OUT
        client_ttft.append((times[0] - sent) / 1e6)
        serve_tpot.append((times[-1] - times[0]) / 1e6 / (OUT - 1))
    assert server_count == N

    cluster = ClusterSpec(
        model=resolve_model("llama-3.1-8b"),
        gpu=resolve_gpu("h100-sxm"),
        model_id="llama-3.1-8b",
        disagg=parse_disagg(disagg) if disagg else None,
        attention_dp=dp,
        replicas=dp,  # as sim runs --attention-dp: one replica per rank
    )
    specs = [
        # random seeds: sim draws each request's API-server jitter from (seed ^ id), serve from its own sequence
        RequestSpec(id=i, input_tokens=n, output_tokens=OUT, at_ns=round(i * GAP_S * 1e9), seed=rng.randrange(2**31))
        for i, n in enumerate(lengths)
    ]
    sim_ttft, sim_tpot = [], []
    for rec in Simulation(cluster, specs).run():
        assert rec.first_token_ns is not None
        assert rec.end_ns is not None
        sim_ttft.append((rec.first_token_ns - rec.scheduled_ns) / 1e6)
        sim_tpot.append((rec.end_ns - rec.first_token_ns) / 1e6 / (OUT - 1))

    c_ttft, s_tpot = _stats(client_ttft, serve_tpot)
    s_ttft = server_ttft_s / server_count * 1e3
    m_ttft, m_tpot = _stats(sim_ttft, sim_tpot)
    print(
        f"\n{'disaggregated' if disagg else f'{dp} attention-DP ranks' if dp > 1 else 'one replica'}: "
        f"mean TTFT serve {s_ttft:.1f} ms (the client saw {c_ttft:.1f}: +{c_ttft - s_ttft:.1f} ms transport) vs sim "
        f"{m_ttft:.1f} ms; mean TPOT serve {s_tpot:.2f} vs sim {m_tpot:.2f} ms; engine loop late by ≤ "
        f"{loop_lag_s * 1e3:.1f} ms"
    )
    assert len(sim_ttft) == N
    # the client's clock reads its send before the server's receipt and its first token after the release: its TTFT
    # holds the server's (one monotonic clock across the two processes)
    assert c_ttft >= s_ttft
    # judged at or below 0.75 × the CPUs, as the token-schedule checks
    judgement.holds(
        abs(s_tpot - m_tpot) <= 0.05 * m_tpot + 0.3 and abs(s_ttft - m_ttft) <= 0.15 * m_ttft + 5.0,
        f"serve vs sim: TTFT {s_ttft:.1f} vs {m_ttft:.1f} ms, TPOT {s_tpot:.2f} vs {m_tpot:.2f} ms",
        share=0.75,
    )


def test_speculative_decoding_is_served_as_simulated(judgement: Judgement) -> None:
    """``serve --spec-draft 3 --spec-accept 0.7`` decodes at the simulated speculative speed (it was sim-only)."""
    import tailscope

    engine, options = build_replica("llama-3.1-8b", "h100-sxm", spec_draft=3, spec_accept=0.7)
    with EmbeddedServer(engine, options) as srv:
        assert srv.call(lambda st: type(st.loop.engine.perf).__name__) == "SpeculativeStepModel"
        served = tailscope.bench(
            srv.base_url, model="llama-3.1-8b", requests=12, concurrency=4, input_tokens=128, output_tokens=64
        )
    work = {"requests": 12, "concurrency": 4, "input_tokens": "128", "output_tokens": "64"}
    spec = tailscope.simulate(spec_draft=3, spec_accept=0.7, **work).summary.tpot_ms.p50
    plain = tailscope.simulate(**work).summary.tpot_ms.p50
    got = served.summary.tpot_ms.p50
    assert served.summary.requests.completed == 12
    assert spec is not None
    assert plain is not None
    assert got is not None
    # wall-clock figures, judged (3.63 ms served against 3.67 simulated and 7.02 without drafting, measured alone)
    judgement.holds(got < 0.8 * plain, f"served speculative TPOT p50 {got:.2f} ms vs {plain:.2f} ms without drafting")
    judgement.holds(abs(got - spec) < 0.15 * spec, f"served TPOT p50 {got:.2f} ms vs simulated {spec:.2f} ms")


def test_a_closed_loop_is_served_as_simulated_when_both_start_it_alike(judgement: Judgement) -> None:
    """bench starts a closed loop's clients together, sim spreads them over a request's lifetime unless told
    (``stagger``): given the same start, the built-in engine served over HTTP and the simulator agree; docs/engine.md
    ("tailscope sim") has the figures."""
    import tailscope

    load = {"concurrency": 8, "requests": 40, "input_tokens": "uniform:100:900", "output_tokens": 48, "seed": 3}
    spread = tailscope.simulate(**load)
    stagger = spread.sim.clients_stagger_s
    assert stagger is not None
    assert stagger > 0
    pairs = []
    for start in (0.0, stagger):
        served = tailscope.bench(**load, stagger=start)
        simulated = tailscope.simulate(**load, stagger=start)
        assert served.summary.requests.completed == simulated.summary.requests.completed == 40
        assert served.run.settings["stagger_s"] == start
        assert simulated.sim.clients_stagger_s == start
        pairs.append((start, served.summary.ttft_ms.mean, simulated.summary.ttft_ms.mean))
    print("\n" + "; ".join(f"stagger {s:.2f} s: TTFT mean bench {b:.1f} vs sim {m:.1f} ms" for s, b, m in pairs))
    judgement.holds(
        all(abs(b - m) <= 0.2 * m + 10.0 for _, b, m in pairs),
        "bench vs sim of a closed loop: " + ", ".join(f"stagger {s:.2f} s {b:.1f} vs {m:.1f} ms" for s, b, m in pairs),
        share=0.75,
    )
