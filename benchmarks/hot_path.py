"""Per-token-event CPU of the client's hot path, in process (no network, no server).

Feeds a recorded vLLM-style stream (chunked transfer encoding, one SSE event per network read) through the raw
transport's protocol and the OpenAI client's consume path — exactly what runs per network read in a bench
(:func:`tailscope.client_cost`) — and prints CPU µs per token event. Target: ≤ 10 µs.

    .venv/bin/python benchmarks/hot_path.py --streams 200 --tokens 256
    .venv/bin/python benchmarks/hot_path.py --usage off     # no continuous usage (token counts from chunks)
"""

from __future__ import annotations

import argparse

import tailscope


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--usage", choices=("on", "off"), default="on", help="per-chunk usage (vLLM continuous usage)")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many passes")
    a = ap.parse_args()
    cost = tailscope.client_cost(streams=a.streams, tokens=a.tokens, usage=a.usage == "on", repeat=a.repeat)
    print(
        f"{cost.us_per_event:.2f} µs CPU per token event ({cost.events_per_pass:,} events per pass, best of "
        f"{cost.passes}; usage {a.usage})"
    )


if __name__ == "__main__":
    main()
