"""``bench --dataset REF``: a dataset's real prompts (and conversations) sent with the flags' load shape or at the
rows' own times."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tailscope.errors import ConfigError
from tailscope.runner.base_config import Resolved, base_config, flag_shape, shape_settings, token_counter
from tailscope.runner.options import BenchOptions
from tailscope.runner.preflight import LengthBound
from tailscope.runner.progress import Progress
from tailscope.workload.lengths import empirical, parse_length_spec
from tailscope.workload.spec import RequestSpec

if TYPE_CHECKING:
    from tailscope.io.datasets import DatasetRow
    from tailscope.workload.datasets import Conversation


def resolve_dataset(opts: BenchOptions) -> Resolved:
    """Real prompts from a dataset file, sent with the load shape of the flags (or at the rows' own times)."""
    from tailscope.io.datasets import filter_rows, read_dataset
    from tailscope.workload.datasets import dataset_requests

    assert opts.dataset is not None
    data = read_dataset(opts.dataset, turns=opts.dataset_turns)
    count = token_counter(opts)
    rows = filter_rows(data.rows, min_tokens=opts.dataset_min_input, max_tokens=opts.dataset_max_input, count=count)
    if not rows:
        raise ConfigError(
            f"--dataset {opts.dataset}: no row has a prompt of {opts.dataset_min_input or 1}–"
            f"{opts.dataset_max_input or '∞'} tokens ({len(data.rows)} rows read); widen the length filter"
        )
    conversations = conversations_of(rows)
    timed = all(c[0].timestamp_s is not None for c in conversations)
    if timed and (opts.given("rate") or opts.given("concurrency")):
        raise ConfigError(
            f"--dataset {opts.dataset}: its rows have timestamp_s, so they fix the send times; drop "
            "--rate/--concurrency (use --time-scale)"
        )
    requests = opts.requests
    if timed and requests is None and opts.duration is None:
        requests = sum(len(c) for c in conversations)  # the whole file, once
    shape = flag_shape(opts, requests=requests, timed=timed)
    out = parse_length_spec(str(opts.output_tokens), what="--output-tokens") if opts.given("output_tokens") else None
    specs = dataset_requests(
        conversations, shape, seed=opts.value("seed"), sample=opts.dataset_sample, output_tokens=out, count=count,
        time_scale=opts.time_scale,
    )  # fmt: skip
    first = next(specs, None)  # a bad option fails now, before the target is contacted
    stream: Iterator[RequestSpec] = iter(()) if first is None else itertools.chain([first], specs)
    cfg = base_config(replace(opts, requests=requests), concurrency=shape.concurrency, cap=shape.max_concurrency)
    in_lengths = [count(r.text()) for r in rows]
    out_lengths = [first.output_tokens] if first is not None else [1]
    settings = {
        **cfg.settings,
        **shape_settings(shape, mode="replay" if timed else None),
        "input_tokens": "dataset",
        "output_tokens": str(out) if out is not None else "dataset",
        "dataset": opts.dataset,
        "dataset_rows": len(rows),
        "dataset_turns": opts.dataset_turns,
        "dataset_sample": opts.dataset_sample,
    }
    cfg = replace(
        cfg,
        requested_rate=None if timed else opts.rate,
        settings=settings,
        profile_name=f"dataset:{Path(data.name.split(':')[-1]).name}",
        saturation_windows=() if timed else None,
        lengths=(LengthBound(f"--dataset {opts.dataset}", empirical(in_lengths), empirical(out_lengths)),),
    )
    total = requests if requests is not None else None
    return Resolved(cfg, stream, Progress(total=total, duration_s=opts.duration))


def conversations_of(rows: Sequence[DatasetRow]) -> list[Conversation]:
    """Dataset rows as conversations, in file order: a row with its later turns, a single row, or the rows sharing a
    ``session`` (in ``turn`` order, at the position of the session's first row)."""
    from tailscope.workload.datasets import Turn

    def turn(r: DatasetRow) -> Turn:
        return Turn(r.prompt, r.messages, r.reference, r.max_tokens, r.request_class, r.timestamp_s)

    def later(r: DatasetRow, prompt: str, reference: str | None) -> Turn:
        return Turn(prompt, None, reference, r.max_tokens, r.request_class, None)

    groups: list[list[DatasetRow]] = []
    by_session: dict[str, list[DatasetRow]] = {}
    for r in rows:
        if r.session is not None and not r.turns:
            if r.session not in by_session:
                by_session[r.session] = []
                groups.append(by_session[r.session])
            by_session[r.session].append(r)
        else:
            groups.append([r])
    out: list[Conversation] = []
    for g in groups:
        if len(g) == 1 and g[0].turns:
            out.append((turn(g[0]), *(later(g[0], p, ref) for p, ref in g[0].turns)))
        else:
            g.sort(key=lambda m: m.turn if m.turn is not None else 0)
            out.append(tuple(turn(m) for m in g))
    return out
