"""Regenerate ``src/tailscope/io/inferencex_recipes.csv``: the public recipes behind the corpus' disaggregated rows
that do not record their worker counts, and behind its aggregated rows that decoded speculatively (``io/corpus.py``
rule 10).

1,009 of the corpus' 1,224 disaggregated rows come from two InferenceX exports (``source_file=2026-03-25.csv`` and
``2026-04-06.csv``) that record each pool's parallelism but not how many workers it had, nor whether the run used
speculative decoding. InferenceX publishes the configuration it benchmarks, per model, precision, GPU and framework:
for every input/output length, a search space of concurrency lists, each with its prefill and decode workers
(``num-worker``, ``tp``, ``ep``, ``dp-attn``) and ``spec-decoding`` (``mtp`` or none) —
``.github/configs/nvidia-master.yaml`` of https://github.com/SemiAnalysisAI/InferenceX. This script reads that file as
it stood when each row was measured (the ``measured=`` date of ``silicon_data_source``; when that version has no entry
for the row's concurrency, the first later version up to the exports' date that has one), and keeps a row when
exactly one deployment lists its concurrency. It writes the deployment and the speculative decoding:

- ``spec``: ``none`` or ``mtp`` when only one kind lists the concurrency; when both do with the same deployment, the
  export holds the two runs as two rows with identical columns, and the one with the lower TPOT is the ``mtp`` run
  (``unknown`` when the pair is not there or ties). No TTFT or TPOT is copied: the recipes hold no measurement.
- ``decode_batch``: the decode workers' running requests at most per attention-DP rank, the ``batchN`` of the
  configuration file (TensorRT-LLM's ``max_batch_size``; empty where the recipe does not name it). Kept for the
  record: the corpus does not use it (docs/engine.md, *Against the targets*).
- ``draft``: an MTP run's draft tokens, the ``mtpK`` of its recipe's configuration file (TensorRT-LLM's recipes name
  it, SGLang's do not: empty then); 0 without speculative decoding.
- the pools as the recipe states them, and the recipe's key and commit (provenance).

The aggregated rows of the same exports that name their container image (``image=`` in ``silicon_data_source``; 556 rows
of the 2026-04-06 export do not) are matched to the single-node entries with that image, at the version in force when
the row was measured (else the first later one that has it): InferenceX runs an MTP recipe as its own entry (``…-mtp``),
usually with its own image (TensorRT-LLM ``1.2.0rc6.post3`` against ``post2`` for the plain runs). When every entry with
the image is MTP, or none is, that says the row's ``spec``; when both are, the search-space item with the row's lengths,
concurrency, ``tp``, ``ep`` and ``dp-attn`` must be of one kind (else the row is not listed). An aggregated row's pools
are empty (its own columns stand); its ``draft`` comes from the entry's launch script
(``benchmarks/[single_node/]<name>.sh`` at the same commit): TensorRT-LLM's ``MTP=K`` (the value its ``DP_ATTENTION``
branch sets where the row runs attention DP), SGLang's ``SPECULATIVE_NUM_STEPS`` (EAGLE with top-k 1: that many draft
steps, then one verification).

Every aggregated row of InferenceX's runs (the exports and its database dump) is also given the scheduler settings its
launch script passed the server (:func:`launch_settings`: the script at the last commit before the row was measured,
``benchmarks/[single_node/]<model>_<precision>_<gpu>[_trt][_mtp][_slurm|_docker].sh`` whose server command is the
row's engine, its ``if``/``elif``/``else`` branches evaluated for the row's lengths, TP and clients by
:func:`launch_options`; a row is left without them where a branch they depend on cannot be evaluated, or scripts
disagree): TensorRT-LLM's ``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio`` and ``--max_num_tokens``
(the budget kept only where it bounds the batch waiting), SGLang's ``--scheduler-recv-interval`` and
``--max-running-requests``, vLLM's ``--max-num-seqs`` (the last two as ``max_running``), and TensorRT-LLM's
attention-DP balancing (``attention_dp_config``'s ``timeout_iters`` where it sets ``enable_balance: true``, as
``dp_balance_iters``; nothing where it does not: see ``io/corpus_recipes.py``).

    python scripts/inferencex_recipes.py ../shared/calibration/silicon_dev.csv PATH/TO/InferenceX [--out FILE]

``PATH/TO/InferenceX`` is a git clone of that repository (its history is read with ``git``). Deterministic.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
MASTER = ".github/configs/nvidia-master.yaml"
TABLE = Path(__file__).parent.parent / "src/tailscope/io/inferencex_recipes.csv"
#: the exports' date: no recipe version after it can have produced their rows
EXPORTED = "2026-04-12"
GPU = {"b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "h100_sxm": "h100", "h200_sxm": "h200"}
FRAMEWORK = {"trtllm": "trt", "sglang": "sglang", "vllm": "vllm"}
MODEL_PREFIX = {
    "deepseek": ("dsr1", "dsv3"),
    "kimi": ("kimik2.5", "kimi"),
    "gpt-oss": ("gptoss",),
    "qwen3.5": ("qwen3.5",),
    "minimax": ("minimaxm2.5",),
}
#: the launch scripts' model prefixes (``benchmarks/[single_node/]<prefix>_<precision>_<gpu>_trt[_mtp][_slurm].sh``)
SCRIPT_PREFIX = {
    "deepseek": ("dsr1",),
    "llama-3.1-70b": ("70b",),
    "gpt-oss": ("gptoss",),
    "kimi": ("kimik2.5",),
    "qwen3.5": ("qwen3.5",),
    "minimax": ("minimaxm2.5",),
}
FIELDS = (
    "id",
    "spec",
    "draft",
    "prefill_workers",
    "prefill_tp",
    "prefill_ep",
    "prefill_dp_attn",
    "decode_workers",
    "decode_tp",
    "decode_ep",
    "decode_dp_attn",
    "decode_batch",
    "recipe",
    "commit",
    "batch_wait_iters",
    "batch_wait_ratio",
    "max_num_tokens",
    "recv_interval",
    "max_running",
    "dp_balance_iters",
)
#: InferenceX's runs (the two exports and its database dump): its launch scripts produced their aggregated rows
RUNS = ("source_file=2026-03-25.csv", "source_file=2026-04-06.csv", "db-dump/")


class Recipes:
    """``nvidia-master.yaml`` at each commit, read on demand."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._parsed: dict[str, dict[str, Any]] = {}
        log = self._git("log", "--reverse", "--format=%H %aI", "--before", EXPORTED, "--", MASTER)
        self.versions = [line.split() for line in log.splitlines() if line.strip()]

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, text=True, check=True).stdout

    def show(self, commit: str, path: str) -> str | None:
        """A file of the repository at ``commit`` (None where it has none)."""
        try:
            return self._git("show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            return None

    def commit_before(self, measured: str) -> str:
        """The repository's last commit before ``measured`` (the launch scripts a row was run with)."""
        return self._git("rev-list", "-1", f"--before={measured[:19]}", "HEAD").strip()

    def at(self, commit: str) -> dict[str, Any]:
        if commit not in self._parsed:
            self._parsed[commit] = yaml.safe_load(self._git("show", f"{commit}:{MASTER}")) or {}
        return self._parsed[commit]

    def first(self, measured: str, find: Callable[[dict[str, Any]], list[T]]) -> tuple[str, list[T]]:
        """(commit, what ``find`` finds in the configuration) at the version in force when a row was ``measured``,
        else the first later version where it finds anything (``("", [])`` where none does)."""
        before = [h for h, d in self.versions if d[:19] <= measured[:19]]
        after = [h for h, d in self.versions if d[:19] > measured[:19]]
        for commit in before[-1:] + after:
            found = find(self.at(commit))
            if found:
                return commit, found
        return "", []


def _same_config(cfg: object, row: dict[str, str]) -> bool:
    """``cfg`` is an entry of the row's framework, GPU, model and precision."""
    if not isinstance(cfg, dict) or cfg.get("precision") != row["precision"]:
        return False
    if FRAMEWORK[row["backend"]] not in str(cfg.get("framework", "")):
        return False
    gpu, runner = GPU[row["system"]], str(cfg.get("runner", ""))
    prefixes = next((p for k, p in MODEL_PREFIX.items() if k in row["model_path"].lower()), ())
    return (runner == gpu or runner.startswith(gpu + "-")) and str(cfg.get("model-prefix", "")) in prefixes


def _field(row: dict[str, str], name: str, pattern: str) -> str | None:
    """``name=VALUE`` of the row's ``silicon_data_source`` (None where it is not there)."""
    m = re.search(rf"{name}=({pattern})", row["silicon_data_source"])
    return m.group(1) if m else None


def entries(master: dict[str, Any], row: dict[str, str], concurrency: int) -> list[dict[str, Any]]:
    """The search-space entries of ``master`` for the row's configuration and lengths that list ``concurrency``."""
    out = []
    for key, cfg in master.items():
        if not _same_config(cfg, row) or not cfg.get("disagg"):
            continue
        for lengths in cfg.get("seq-len-configs") or []:
            if (str(lengths.get("isl")), str(lengths.get("osl"))) != (row["isl"], row["osl"]):
                continue
            for e in lengths.get("search-space") or []:
                if concurrency in (e.get("conc-list") or []):
                    out.append({"key": key, **e})
    return out


def _pool(e: dict[str, Any]) -> tuple[int, int, int, int]:
    return (int(e["num-worker"]), int(e["tp"]), int(e.get("ep") or 1), int(bool(e.get("dp-attn"))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("inferencex", type=Path, help="a git clone of SemiAnalysisAI/InferenceX")
    ap.add_argument("--out", type=Path, default=TABLE)
    a = ap.parse_args(argv)
    rows = list(csv.DictReader(a.corpus.open(encoding="utf-8")))
    recipes = Recipes(a.inferencex)
    pairs: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        pairs[_pair_key(r)].append(r)
    out: list[dict[str, Any]] = []
    tally: Counter[str] = Counter()
    for r in rows:
        if r["mode"] != "disagg" or r["prefill_num_workers"].strip():
            continue
        conc, measured = _field(r, "silicon_concurrency", r"\d+"), _field(r, "measured", r"[0-9T:\-]+")
        if conc is None or measured is None:
            tally["no concurrency or date"] += 1
            continue
        commit, found = recipes.first(measured, partial(entries, row=r, concurrency=int(conc)))
        deployments: dict[tuple[int, ...], set[str]] = defaultdict(set)
        for e in found:
            deployments[(*_pool(e["prefill"]), *_pool(e["decode"]))].add(str(e.get("spec-decoding") or "none"))
        if len(deployments) != 1:
            tally["no recipe" if not deployments else "several deployments"] += 1
            continue
        ((dep, specs),) = deployments.items()
        spec = next(iter(specs)) if len(specs) == 1 else _pair_spec(r, pairs)
        tally[spec] += 1
        key = next(e["key"] for e in found)
        values = (r["id"], spec, _draft(found, spec), *dep, _batch(found), key, commit[:12], *[""] * 6)
        out.append(dict(zip(FIELDS, values, strict=True)))
    agg_tally: Counter[str] = Counter()
    for r in rows:
        if r["mode"] == "agg":
            listed = aggregated_row(recipes, r)
            agg_tally[listed["spec"] if listed else "not listed"] += 1
            settings = launch_settings(recipes, r, listed["spec"] if listed else "")
            if settings:
                agg_tally.update(settings.keys())
                listed = listed or dict(zip(FIELDS, (r["id"], "", "0"), strict=False))
                listed.update(settings)
            if listed:
                out.append({f: listed.get(f, "") for f in FIELDS})
    with a.out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    print(
        f"{len(out)} rows written to {a.out}; disaggregated {dict(tally)}; aggregated {dict(agg_tally)}",
        file=sys.stderr,
    )
    return 0


def aggregated_row(recipes: Recipes, r: dict[str, str]) -> dict[str, Any] | None:
    """An aggregated row's table entry (spec and draft; empty pools), or None when no single-node entry with its
    image is found or the entries do not say which kind of run it was."""
    image, measured = _field(r, "image", r"[^;]+"), _field(r, "measured", r"[0-9T:\-]+")
    conc = _field(r, "silicon_concurrency", r"\d+")
    if image is None or measured is None or conc is None:
        return None
    want = _image(image)
    commit, found = recipes.first(
        measured, lambda m: [(k, c) for k, c in m.items() if _single_node(c, r) and _image(c.get("image")) == want]
    )
    if not found:
        return None
    items = [
        (k, e)
        for k, c in found
        for lengths in c.get("seq-len-configs") or []
        for e in lengths.get("search-space") or []
    ]
    kinds = {_spec(e) for _, e in items}
    if len(kinds) > 1:
        own = [(k, e) for k, c in found for e in _items_for(c, r, int(conc))]
        kinds, items = {_spec(e) for _, e in own}, own
    if len(kinds) != 1:
        return None
    spec = kinds.pop()
    key = items[0][0]
    draft = _script_draft(recipes, commit, key, int(r["attention_dp_size"] or 1) > 1) if spec == "mtp" else "0"
    values = (r["id"], spec, draft, *[""] * 9, key, commit[:12], *[""] * 6)
    return dict(zip(FIELDS, values, strict=True))


#: what a launch script runs, by engine (the script's name does not say SGLang or vLLM; its server command does)
SERVER = {"trtllm": "trtllm-serve", "sglang": "sglang.launch_server", "vllm": "vllm serve"}
#: the launch settings the table keeps, as (option a script writes, table column); TensorRT-LLM's in its YAML
SETTINGS = (
    ("batch_wait_timeout_iters", "batch_wait_iters"),
    ("batch_wait_max_tokens_ratio", "batch_wait_ratio"),
    ("max_num_tokens", "max_num_tokens"),
    ("scheduler-recv-interval", "recv_interval"),
    ("max-running-requests", "max_running"),
    ("max-num-seqs", "max_running"),
    ("enable_balance", "dp_balance"),
    ("timeout_iters", "dp_timeout_iters"),
)


def launch_settings(recipes: Recipes, r: dict[str, str], spec: str) -> dict[str, str] | None:
    """The scheduler settings that the launch script of an aggregated row of InferenceX's runs (the two exports and
    the database dump) gives the server, at the last commit before the row was measured: TensorRT-LLM's batch
    waiting and token budget, SGLang's ``--scheduler-recv-interval`` and ``--max-running-requests``, vLLM's
    ``--max-num-seqs`` (table columns, empty where the script sets none). None where no script of the row's engine
    is found, or several disagree, or a branch they depend on cannot be evaluated for the row. An MTP row (``spec``)
    runs the ``_mtp`` script; a row whose kind is not known is skipped where an ``_mtp`` script exists beside the
    plain one."""
    if not r["silicon_data_source"].startswith(RUNS):
        return None
    measured = _field(r, "measured", r"[0-9T:\-]+")
    conc = _field(r, "silicon_concurrency", r"\d+")
    prefixes = next((p for k, p in SCRIPT_PREFIX.items() if k in r["model_path"].lower()), ())
    if measured is None or conc is None or not prefixes:
        return None
    commit = recipes.commit_before(measured)
    precision = "fp4" if r["precision"] in ("fp4", "mxfp4") else r["precision"]
    engine = "_trt" if r["backend"] == "trtllm" else ""
    texts: dict[str, str] = {}
    for prefix in prefixes:
        for folder in ("benchmarks/single_node", "benchmarks"):
            for kind in ("", "_mtp"):
                for runner in ("", "_slurm", "_docker"):
                    name = f"{folder}/{prefix}_{precision}_{GPU[r['system']]}{engine}{kind}{runner}.sh"
                    text = recipes.show(commit, name)
                    if text is not None and SERVER[r["backend"]] in text:
                        texts[name] = text
    mtp = {n for n in texts if "_mtp" in n}
    if spec == "mtp":
        texts = {n: t for n, t in texts.items() if n in mtp}
    elif spec == "none" or not mtp:
        texts = {n: t for n, t in texts.items() if n not in mtp}
    else:
        return None
    env = {
        "ISL": r["isl"],
        "OSL": r["osl"],
        "TP": r["tp_size"] or "1",
        "CONC": conc,
        "EP_SIZE": r["moe_ep_size"] or "1",
        "DP_ATTENTION": "true" if int(r["attention_dp_size"] or 1) > 1 else "false",
    }
    found = [launch_options(t, env) for t in texts.values()]
    if not found or any(f is None for f in found) or any(f != found[0] for f in found):
        return None
    return found[0]


def launch_options(text: str, env: dict[str, str]) -> dict[str, str] | None:
    """Evaluate a launch script's ``if``/``elif``/``else`` branches and plain assignments for one run (``env``) and
    read the scheduler settings (:data:`SETTINGS`) the taken branches give the server: ``--flag VALUE`` or
    ``--flag=VALUE`` on the command line, ``key: VALUE`` in a here-document (a number, or a variable the script
    assigned, ``$(( … ))`` arithmetic included). None where a branch that sets one tests something not known."""
    values = dict(env)
    # per open if: (this branch: True taken, False not, None not known; whether an earlier branch was taken)
    stack: list[tuple[bool | None, bool | None]] = []
    out: dict[str, str] = {}
    heredoc: str | None = None
    options = "|".join(re.escape(o) for o, _ in SETTINGS)

    def state() -> bool | None:
        states = [b[0] for b in stack]
        return False if False in states else (None if None in states else True)

    def read(line: str, pattern: str) -> bool:
        """Record the settings ``line`` gives; False where it gives one in a branch not known."""
        for m in re.finditer(pattern, line):
            if state() is None:
                return False
            if state():
                out[dict(SETTINGS)[m.group(1)]] = _value(m.group(2), values)
        return True

    for raw in text.splitlines():
        line = raw.strip()
        if heredoc is not None:
            if line == heredoc:
                heredoc = None
            elif not read(line, rf"^({options}):\s*(\S+)"):
                return None
            continue
        doc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if doc:
            heredoc = doc.group(1)
        m = re.match(r"(el)?if (.*); then$", line)
        if m:
            before: bool | None = False
            if m.group(1) and stack:
                before = stack.pop()[1]
            ok = _test(m.group(2), values)
            if before is True:
                stack.append((False, True))
            elif before is None or ok is None:
                stack.append((None, None))
            else:
                stack.append((ok, ok))
            continue
        if line == "else" and stack:
            taken = stack.pop()[1]
            stack.append((None if taken is None else not taken, True))
            continue
        if line == "fi" and stack:
            stack.pop()
            continue
        if not read(line, rf"--({options})[ =](\S+)"):
            return None
        assign = re.match(r"(?:local )?([A-Za-z_]\w*)=(\$\(\(.*\)\)|\S*)$", line)
        if assign and state() is None:
            values[assign.group(1)] = ""  # assigned in a branch not known: not known either
        elif assign and state():
            values[assign.group(1)] = _value(assign.group(2), values)
    balance, timeout = out.pop("dp_balance", ""), out.pop("dp_timeout_iters", "")
    if balance == "true" and timeout:  # TensorRT-LLM's attention_dp_config: balancing, and its timeout
        out["dp_balance_iters"] = timeout
    if not (out.get("batch_wait_iters", "0") != "0" and out.get("batch_wait_ratio", "0") != "0"):
        for k in ("batch_wait_iters", "batch_wait_ratio", "max_num_tokens"):
            out.pop(k, None)  # the budget is kept for what it bounds: the batch waiting's threshold
    if not all(re.fullmatch(r"[0-9]+(\.[0-9]+)?", v) for v in out.values()):
        return None  # a setting the run's values do not determine
    return out


def _value(text: str, values: dict[str, str]) -> str:
    """A shell value: a literal, ``$VAR``/``${VAR}``, or ``$(( … ))`` integer arithmetic (``a > b ? a : b`` included)
    over known variables; empty where it cannot be known."""
    text = text.strip().strip('"').strip("'")
    m = re.fullmatch(r"\$\(\((.*)\)\)", text)
    if m:
        expr = re.sub(r"\$?\{?([A-Za-z_]\w*)\}?", lambda v: values.get(v.group(1), "?"), m.group(1))
        expr = re.sub(r"(\w+) > (\w+) \? \1 : \2", r"max(\1, \2)", expr).replace("/", "//")
        if "?" in expr or not re.fullmatch(r"[0-9+\-*/() ,maxin]*", expr):
            return ""
        return str(eval(expr, {"__builtins__": {}}, {"max": max}))  # noqa: S307 - digits and operators only
    m = re.fullmatch(r"\$\{?([A-Za-z_]\w*)\}?", text)
    if m:
        return values.get(m.group(1), "")
    return text


def _test(cond: str, values: dict[str, str]) -> bool | None:
    """An ``if`` condition: ``[[ … ]]`` or ``[ … ]`` tests of ``==``/``=``/``!=`` and integer comparisons, joined by
    ``&&``/``||`` inside or between them (None: not known)."""
    cond = re.sub(r"\]\]?\s*(\|\||&&)\s*\[\[?", r" \1 ", cond.strip())
    m = re.fullmatch(r"\[\[?\s*(.*?)\s*\]?\]", cond)
    if not m:
        return None
    return _clauses(m.group(1), values)


def _clauses(cond: str, values: dict[str, str]) -> bool | None:
    if "||" in cond:
        parts = [_clauses(c, values) for c in cond.split("||")]
        return True if any(parts) else (None if None in parts else False)
    result = True
    for clause in cond.split("&&"):
        m = re.fullmatch(r"\s*(\S+)\s+(==|=|!=|-lt|-le|-gt|-ge|-eq|-ne)\s+(\S+)\s*", clause)
        if not m:
            return None
        a, op, b = _value(m.group(1), values), m.group(2), _value(m.group(3), values)
        if a == "" or b == "":
            return None
        if op in ("==", "=", "!="):
            ok = (a == b) == (op != "!=")
        else:
            try:
                x, y = int(a), int(b)
            except ValueError:
                return None
            ok = {"-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y, "-eq": x == y, "-ne": x != y}[op]
        result = result and ok
    return result


def _image(text: object) -> str:
    """A container image as the configs and the export both write it (``nvcr.io#nvidia/…`` is ``nvcr.io/nvidia/…``)."""
    return str(text or "").strip().replace("#", "/")


def _single_node(cfg: object, r: dict[str, str]) -> bool:
    """``cfg`` is a single-node entry of the row's framework, GPU, model and precision."""
    return isinstance(cfg, dict) and _same_config(cfg, r) and not cfg.get("disagg") and not cfg.get("multinode")


def _items_for(cfg: dict[str, Any], r: dict[str, str], concurrency: int) -> list[dict[str, Any]]:
    """The search-space items of a single-node entry with the row's lengths, concurrency and parallelism."""
    own = (int(r["tp_size"] or 0), int(r["moe_ep_size"] or 1), int(r["attention_dp_size"] or 1) > 1)
    out = []
    for lengths in cfg.get("seq-len-configs") or []:
        if (str(lengths.get("isl")), str(lengths.get("osl"))) != (r["isl"], r["osl"]):
            continue
        for e in lengths.get("search-space") or []:
            if not int(e.get("conc-start", 0)) <= concurrency <= int(e.get("conc-end", 0)):
                continue
            if (int(e.get("tp", 0)), int(e.get("ep") or 1), bool(e.get("dp-attn"))) == own:
                out.append(e)
    return out


def _spec(e: dict[str, Any]) -> str:
    return str(e.get("spec-decoding") or "none")


def _script_draft(recipes: Recipes, commit: str, key: str, dp_attn: bool) -> str:
    """An aggregated MTP entry's draft length from its launch script at ``commit`` (empty when not found)."""
    names = {key.replace("-", "_"), key.replace("-sglang", "").replace("-", "_")}
    for name in sorted(names):
        for folder in ("benchmarks/single_node", "benchmarks"):
            text = recipes.show(commit, f"{folder}/{name}.sh")
            if text is None:
                continue
            steps = re.search(r"^\s*SPECULATIVE_NUM_STEPS=(\d+)", text, re.M)
            if steps:
                return steps.group(1)
            block = re.search(r'if \[\[ "\$DP_ATTENTION" == "true" \]\]; then(.*?)(?:\nelse(.*?))?\nfi', text, re.S)
            inside = re.findall(r"^\s*MTP=(\d+)", block.group(1), re.M) if block else []
            rest = text.replace(block.group(0), block.group(2) or "") if block else text
            outside = re.findall(r"^\s*MTP=(\d+)", rest, re.M)
            chosen = inside if dp_attn and inside else outside
            return chosen[-1] if chosen else ""
    return ""


def _draft(found: list[dict[str, Any]], spec: str) -> str:
    """Draft tokens of an MTP run: the ``mtpK`` its recipe's configuration file is named with (TensorRT-LLM's;
    empty when the MTP entries do not say, or disagree), 0 without speculative decoding."""
    if spec == "none":
        return "0"
    if spec != "mtp":
        return ""
    ks = {m for e in found if e.get("spec-decoding") == "mtp" for m in re.findall(r"mtp(\d)", str(e))}
    return ks.pop() if len(ks) == 1 else ""


def _batch(found: list[dict[str, Any]]) -> str:
    """The decode workers' running requests at most per attention-DP rank: the ``batchN`` the recipes' configuration
    files are named with (TensorRT-LLM's ``max_batch_size``; empty when they do not say, or disagree)."""
    sizes = {m for e in found for m in re.findall(r"_batch(\d+)_", str(e))}
    return sizes.pop() if len(sizes) == 1 else ""


def _pair_key(r: dict[str, str]) -> tuple[str, ...]:
    """What two runs of one deployment and workload share in the export: every column but the id, the measurement
    and its date (the source before ``measured=`` names the export, model and concurrency)."""
    same = (v for k, v in r.items() if k not in ("id", "silicon_data_source", "silicon_ttft_ms", "silicon_tpot_ms"))
    return (*same, r["silicon_data_source"].split("measured=")[0])


def _pair_spec(r: dict[str, str], pairs: dict[tuple[str, ...], list[dict[str, str]]]) -> str:
    """Both kinds list the concurrency with one deployment: the export's two runs are two rows with the same columns,
    and the faster decode is the speculative one."""
    group = pairs[_pair_key(r)]
    if len(group) != 2:
        return "unknown"
    a, b = sorted(group, key=lambda x: float(x["silicon_tpot_ms"]))
    if float(a["silicon_tpot_ms"]) == float(b["silicon_tpot_ms"]):
        return "unknown"
    return "mtp" if a["id"] == r["id"] else "none"


if __name__ == "__main__":
    sys.exit(main())
