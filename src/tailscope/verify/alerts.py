"""Prometheus recording and alerting rules from a contract: the golden signals of an LLM engine.

The rules read vLLM's metric names (the built-in ``tailscope serve`` exposes the same names):

* latency quantiles from the engine's histograms — ``histogram_quantile(q, sum by (le) (rate(X_bucket[w])))`` over
  ``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``,
  ``vllm:request_time_per_output_token_seconds`` and ``vllm:inter_token_latency_seconds``;
* the error ratio from the HTTP layer's ``http_requests_total{status}`` (5xx over all);
* throughput from ``vllm:request_success_total`` and ``vllm:generation_tokens_total``;
* saturation: ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, ``vllm:num_preemptions_total``, and
  ``vllm:num_requests_running`` with the median TTFT (a backlog the engine admits: KV to spare, nothing waits);
* the engine being down (crash, OOM kill): ``up == 0``. vLLM has no OOM counter; a killed engine stops answering
  scrapes, which this alert catches.

Every latency, error and throughput SLO of the contract becomes an alert with the contract's limit; the saturation
alerts are always generated. Each alert has ``for:`` (the SLO's own ``for:`` in the contract, else the global one), a
``severity`` label (the SLO's ``severity:``, else critical/warning) and a ``runbook`` annotation holding the diagnosis
checklist for its symptom (:data:`tailscope.verify.diagnose.CHECKLISTS`). A layer SLO becomes an alert when the layer's
duration histogram is named (:attr:`AlertOptions.layer_metrics`). Every SLO that cannot become a rule — per-class SLOs
(engine metrics carry no request class), means, layers without a histogram — is listed in :attr:`AlertRules.skipped`
with the reason.

:func:`golden_alerts` is the method's five golden alerts (../shared/method/003 §4.3), each with its own duration,
severity and root-cause checklist: LLM P99 > 1.2 s for 2m (page), vector search P99.9 > 200 ms for 1m, OOM errors > 0
within 5m (page), unavailable ratio > 1 % for 30s (page), prompt rejection rate > 5 % for 1m.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from tailscope.errors import ConfigError
from tailscope.metrics.percentiles import percentile_fraction
from tailscope.verify.contract import Contract, LayerCheck, SloCheck, percentile_label
from tailscope.verify.diagnose import CHECKLISTS
from tailscope.verify.rules_engine import SATURATION_BACKLOG_MIN, SATURATION_TTFT_RISE

#: contract latency metric → (engine histogram, short name, checklist key).
HISTOGRAMS: dict[str, tuple[str, str, str]] = {
    "ttft_ms": ("vllm:time_to_first_token_seconds", "ttft", "ttft"),
    "e2e_ms": ("vllm:e2e_request_latency_seconds", "e2e", "e2e"),
    "tpot_ms": ("vllm:request_time_per_output_token_seconds", "tpot", "tpot"),
    "itl_ms": ("vllm:inter_token_latency_seconds", "itl", "tpot"),
}
#: golden-signal quantiles always recorded, per histogram.
GOLDEN_QUANTILES: tuple[str, ...] = ("p50", "p99")
KV_USAGE_LIMIT = 0.9
#: the backlog alert compares the median TTFT with its lowest over this span
BACKLOG_BASELINE = "1h"


@dataclass(frozen=True, slots=True)
class AlertOptions:
    """Knobs of the generated rules.

    Attributes:
        for_: how long a condition must hold before the alert fires (Prometheus duration, e.g. ``5m``).
        window: the rate window of the quantiles and ratios (``5m``).
        selector: label matchers added to every engine metric, e.g. ``job="vllm",namespace="prod"``.
        queue_limit: the backlog alert fires when the waiting queue stayed above this for the whole window (a queue
            that never drained: saturation, not a momentary blip).
        kv_limit: KV-cache usage (0–1) above which the KV alert fires.
        layer_metrics: ``(layer, histogram)`` pairs: the Prometheus histogram (in seconds, without ``_bucket``) of a
            layer's durations, e.g. ``("retrieval", "vector_search_duration_seconds")``; the contract's SLOs on that
            layer become alerts on it (the golden vector-search alert reads the ``retrieval`` one).
        oom_metric: the counter of out-of-memory errors the golden OOM alert reads (vLLM has none of its own; export
            one from the serving wrapper, or map the container's OOM kills into it).
    """

    for_: str = "5m"
    window: str = "5m"
    selector: str = ""
    queue_limit: float = 0.0
    kv_limit: float = KV_USAGE_LIMIT
    layer_metrics: tuple[tuple[str, str], ...] = ()
    oom_metric: str = "llm_out_of_memory_errors_total"


_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*'


def check_options(opts: AlertOptions) -> None:
    """Refuse options Prometheus would reject, naming the flag (``--for``, ``--window``, ``--selector``, …).

    Raises:
        ConfigError: one line naming the option and the expected form.
    """
    for flag, value in (("--for", opts.for_), ("--window", opts.window)):
        if not _DURATION.match(value):
            raise ConfigError(f"{flag} {value!r}: expected a Prometheus duration like 30s, 5m or 1h")
    if opts.selector.strip() and not re.fullmatch(f"{_MATCHER}(,{_MATCHER})*,?", opts.selector):
        raise ConfigError(f'--selector {opts.selector!r}: expected label matchers like job="vllm",namespace=~"prod.*"')
    if not 0 < opts.kv_limit <= 1:
        raise ConfigError(f"--kv-limit must be in (0, 1] (got {opts.kv_limit})")
    for layer, metric in opts.layer_metrics:
        if not _METRIC_NAME.fullmatch(metric):
            raise ConfigError(f"--layer-metric {layer}={metric}: expected a Prometheus metric name")
    if not _METRIC_NAME.fullmatch(opts.oom_metric):
        raise ConfigError(f"--oom-metric {opts.oom_metric!r}: expected a Prometheus metric name")


class _Dumper(yaml.SafeDumper):
    """Safe dumper writing multi-line strings as ``|`` blocks."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


@dataclass(frozen=True, slots=True)
class AlertRules:
    """Generated rule groups (the Prometheus rule-file document) and the SLOs that could not be alerted on.

    Attributes:
        document: the rule file (``{"groups": [recording rules, alerts]}``); :meth:`to_yaml` writes it.
        skipped: one line per SLO that engine metrics cannot alert on (per-class SLOs, means, maxima).
        grafana: a Grafana dashboard over the recording rules (:func:`tailscope.verify.grafana.dashboard`), when made.
    """

    document: dict[str, Any]
    skipped: tuple[str, ...] = field(default=())
    grafana: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The rule file as a dict (what :meth:`to_yaml` writes)."""
        return self.document

    def to_yaml(self) -> str:
        """The rule file as YAML (multi-line runbooks as literal blocks)."""
        return yaml.dump(self.document, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)

    @property
    def alert_names(self) -> list[str]:
        """The alerts' names, in file order."""
        return [r["alert"] for g in self.document["groups"] for r in g["rules"] if "alert" in r]

    @property
    def record_names(self) -> list[str]:
        """The recording rules' names, in file order."""
        return [r["record"] for g in self.document["groups"] for r in g["rules"] if "record" in r]


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_").lower() or "contract"


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in _slug(text).split("_"))


def _sel(opts: AlertOptions, extra: str = "") -> str:
    parts = [p for p in (opts.selector.strip().rstrip(","), extra) if p]
    return "{" + ",".join(parts) + "}" if parts else ""


def quantile_record(metric: str, stat: str) -> str:
    """Recording-rule name of a latency quantile, e.g. ``tailscope:ttft_seconds:p99``."""
    return f"tailscope:{HISTOGRAMS[metric][1]}_seconds:{stat}"


def _quantile_expr(metric: str, stat: str, opts: AlertOptions) -> str:
    hist = HISTOGRAMS[metric][0]
    q = percentile_fraction(stat)
    return f"histogram_quantile({q:g}, sum by (le) (rate({hist}_bucket{_sel(opts)}[{opts.window}])))"


def _runbook(key: str | tuple[str, ...]) -> str:
    steps = CHECKLISTS[key] if isinstance(key, str) else key
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1))


def _alert(
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    runbook: str | tuple[str, ...],
    opts: AlertOptions,
    for_: str | None = None,
    **labels: str,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_ or opts.for_,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary, "description": description, "runbook": _runbook(runbook)},
    }


def _recordings(contract: Contract, opts: AlertOptions) -> list[dict[str, Any]]:
    wanted: dict[str, set[str]] = {m: set(GOLDEN_QUANTILES) for m in ("ttft_ms", "e2e_ms")}
    for s in contract.slos:
        if s.metric in HISTOGRAMS and s.percentile not in (None, "mean", "max") and s.request_class is None:
            wanted.setdefault(s.metric, set(GOLDEN_QUANTILES)).add(s.percentile)
    rules: list[dict[str, Any]] = []
    for metric in HISTOGRAMS:
        for stat in sorted(wanted.get(metric, ()), key=percentile_fraction):
            rules.append({"record": quantile_record(metric, stat), "expr": _quantile_expr(metric, stat, opts)})
    w = opts.window
    five_xx = _sel(opts, 'status=~"5..|5xx"')
    errors = f"sum(rate(http_requests_total{five_xx}[{w}]))"
    total = f"sum(rate(http_requests_total{_sel(opts)}[{w}]))"
    rules += [
        {"record": "tailscope:error_ratio", "expr": f"({errors} or vector(0)) / {total}"},
        {"record": "tailscope:requests_per_s", "expr": f"sum(rate(vllm:request_success_total{_sel(opts)}[{w}]))"},
        {
            "record": "tailscope:output_tokens_per_s",
            "expr": f"sum(rate(vllm:generation_tokens_total{_sel(opts)}[{w}]))",
        },
        {"record": "tailscope:requests_waiting", "expr": f"sum(vllm:num_requests_waiting{_sel(opts)})"},
        {"record": "tailscope:requests_running", "expr": f"sum(vllm:num_requests_running{_sel(opts)})"},
        {"record": "tailscope:kv_cache_usage", "expr": f"max(vllm:kv_cache_usage_perc{_sel(opts)})"},
        {
            "record": "tailscope:preemptions_per_s",
            "expr": f"sum(rate(vllm:num_preemptions_total{_sel(opts)}[{w}]))",
        },
    ]
    for rule in rules:
        rule["labels"] = {"contract": contract.name}
    return rules


def series(record: str, contract: Contract) -> str:
    """A recorded series of ``contract`` as a PromQL selector: ``tailscope:error_ratio{contract="chat"}``."""
    return f'{record}{{contract="{_escape(contract.name)}"}}'


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _slo_alert(contract: Contract, s: SloCheck, opts: AlertOptions) -> dict[str, Any] | None:
    base = _camel(contract.name)
    labels = {"contract": contract.name, "slo": s.name}
    if s.metric in HISTOGRAMS and s.max is not None and s.percentile not in (None, "mean", "max"):
        stat = s.percentile or "p99"
        short, key = HISTOGRAMS[s.metric][1], HISTOGRAMS[s.metric][2]
        limit_s = s.max / 1000.0
        return _alert(
            f"{base}{short.upper()}{percentile_label(stat).replace('.', '').upper()}SloBreach",
            f"{series(quantile_record(s.metric, stat), contract)} > {limit_s:g}",
            s.severity or "critical",
            f"{short.upper()} {percentile_label(stat)} above {s.max:g} ms ({contract.name})",
            f"{short.upper()} {percentile_label(stat)} is {{{{ $value | humanizeDuration }}}} over the last "
            f"{opts.window}; the contract allows {s.max:g} ms.",
            key,
            opts,
            s.alert_for,
            **labels,
        )
    if s.metric == "error_rate" and s.max is not None:
        return _alert(
            f"{base}ErrorRatioSloBreach",
            f"{series('tailscope:error_ratio', contract)} > {s.max:g}",
            s.severity or "critical",
            f"error ratio above {s.max:g} ({contract.name})",
            f"{{{{ $value | humanizePercentage }}}} of requests failed over the last {opts.window}; "
            f"the contract allows {s.max:g}.",
            "errors",
            opts,
            s.alert_for,
            **labels,
        )
    if s.metric in ("requests_per_s", "goodput_rps", "output_tokens_per_s") and s.min is not None:
        record = "tailscope:output_tokens_per_s" if s.metric == "output_tokens_per_s" else "tailscope:requests_per_s"
        note = " (goodput is approximated by completed requests: engine metrics carry no per-request SLO verdict)"
        return _alert(
            f"{base}{_camel(s.metric)}Low",
            f"{series(record, contract)} < {s.min:g}",
            s.severity or "warning",
            f"{s.metric} below {s.min:g}/s ({contract.name})",
            f"{s.metric} is {{{{ $value }}}}/s over the last {opts.window}; the contract wants ≥ {s.min:g}/s"
            + (note if s.metric == "goodput_rps" else "")
            + ".",
            "throughput",
            opts,
            s.alert_for,
            **labels,
        )
    return None


def _saturation_alerts(contract: Contract, opts: AlertOptions) -> list[dict[str, Any]]:
    base = _camel(contract.name)
    labels = {"contract": contract.name}
    w = opts.window
    ttft_p50 = quantile_record("ttft_ms", "p50")
    return [
        _alert(
            f"{base}RequestsQueueing",
            f"min_over_time({series('tailscope:requests_waiting', contract)}[{w}]) > {opts.queue_limit:g}",
            "warning",
            f"requests wait in the engine queue ({contract.name})",
            f"at least {{{{ $value }}}} requests waited at every moment of the last {w}: the engine is saturated "
            "and TTFT grows.",
            "queue",
            opts,
            **labels,
        ),
        _alert(
            # the backlog an engine with KV to spare admits: its queue stays empty while the requests it runs and
            # their TTFT grow (chunked prefills beside the decodes) — what `tailscope diagnose` calls "the backlog
            # grows inside the engine", with the same thresholds
            f"{base}BacklogGrowing",
            # TTFT against its lowest of the last hour, not of one window ago: under a sustained overload TTFT grows
            # about linearly, so its rise over a fixed window shrinks towards ×1 and the alert would resolve itself
            f"delta({series('tailscope:requests_running', contract)}[{w}]) >= {SATURATION_BACKLOG_MIN:g}"
            f" and {series(ttft_p50, contract)} >= {SATURATION_TTFT_RISE:g} * "
            f"min_over_time({series(ttft_p50, contract)}[{BACKLOG_BASELINE}])",
            "warning",
            f"the engine's running backlog grows ({contract.name})",
            f"{{{{ $value }}}} more requests run in the engine than {w} ago while the median TTFT is ×"
            f"{SATURATION_TTFT_RISE:g} or more its lowest of the last {BACKLOG_BASELINE}: the engine admits a growing "
            "backlog (KV cache to spare, so nothing waits in its queue) and each new prompt is prefilled behind the "
            "others — saturation without a queue.",
            (
                "Offered load above capacity: compare the request rate with the capacity from `tailscope plan`.",
                "Lower the offered load or add replicas until TTFT and the running requests stay flat.",
                "Cap max_num_seqs near the knee's batch: admitted requests keep their step time and the overload "
                "shows as a waiting queue (…RequestsQueueing) that autoscaling can read.",
            ),
            opts,
            **labels,
        ),
        _alert(
            f"{base}KvCacheNearFull",
            f"{series('tailscope:kv_cache_usage', contract)} > {opts.kv_limit:g}",
            "warning",
            f"KV cache above {opts.kv_limit:.0%} ({contract.name})",
            "KV-cache usage is {{ $value | humanizePercentage }}: expect preemptions and slower decoding.",
            "kv",
            opts,
            **labels,
        ),
        _alert(
            f"{base}Preemptions",
            f"{series('tailscope:preemptions_per_s', contract)} > 0",
            "warning",
            f"the engine preempts requests ({contract.name})",
            "{{ $value }} preemptions/s: requests are evicted from the KV cache and recomputed.",
            "preemption",
            opts,
            **labels,
        ),
        _alert(
            f"{base}EngineDown",
            f"up{_sel(opts)} == 0",
            "critical",
            f"an engine stopped answering scrapes ({contract.name})",
            "{{ $labels.instance }} is down: crashed, OOM-killed or restarting.",
            "errors",
            opts,
            **labels,
        ),
    ]


def _layer_quantile(metric: str, stat: str, opts: AlertOptions) -> str:
    q = percentile_fraction(stat)
    return f"histogram_quantile({q:g}, sum by (le) (rate({metric}_bucket{_sel(opts)}[{opts.window}])))"


def _layer_alert(contract: Contract, lay: LayerCheck, metric: str, opts: AlertOptions) -> dict[str, Any]:
    stat = percentile_label(lay.percentile)
    return _alert(
        f"{_camel(contract.name)}{_camel(lay.layer)}{stat.replace('.', '').upper()}SloBreach",
        f"{_layer_quantile(metric, lay.percentile, opts)} > {lay.max_ms / 1000.0:g}",
        lay.severity or "warning",
        f"{lay.layer} {stat} above {lay.max_ms:g} ms ({contract.name})",
        f"the {lay.layer} layer's {stat} ({metric}) is {{{{ $value | humanizeDuration }}}} over the last "
        f"{opts.window}; its contract allows {lay.max_ms:g} ms.",
        GOLDEN_CHECKLISTS["vector_search"] if lay.layer == "retrieval" else "e2e",
        opts,
        lay.alert_for,
        contract=contract.name,
        slo=lay.name,
    )


#: The golden alerts' root-cause checklists (../shared/method/003 §4.3, with the causes its §2.1, §3.2 and §4.4 name).
GOLDEN_CHECKLISTS: dict[str, tuple[str, ...]] = {
    "llm_p99": (
        "GPU memory usage > 95 %? → check the batch size configuration (max_num_seqs, max_num_batched_tokens).",
        "Vector-store QPS surging? → check for crawlers or a retry storm upstream.",
        "LLM token generation rate < 5 tokens/s? → check whether the model is stuck (engine hung, preemption loop).",
        "Queueing? vllm:num_requests_waiting > 0 → saturation: shed load or add replicas.",
        "Run `tailscope diagnose latest` on a fresh bench run for the numbers.",
    ),
    "vector_search": (
        "Which queries are slow? Vague or rare queries can fall back to a full scan: look at the slow requests' text.",
        "Client connection pooling on? A new TCP connection per request exhausts ports (TIME_WAIT) and adds latency.",
        "Cache hit rate dropped? Real queries are more scattered than a benchmark's hot keywords.",
        "CPU pinned on one core, disk reads slow? Memory map or cache too small → raise the cache, pre-warm the index.",
        "A recent upgrade of the vector store or its index? Compare against the last release's load test.",
    ),
    "oom": (
        "Concurrency or batch size up? KV cache grows with concurrent sequences × their length: cap max_num_seqs.",
        "Longer prompts or sessions? Check the prompt-length distribution; cap max_model_len.",
        "Memory fragmented by uneven batches? KV-cache fragmentation > 40 % → rebuild the replica, do not scale it.",
        "Free memory for KV: lower gpu_memory_utilization headroom, FP8 KV cache, or add replicas.",
    ),
    "unavailable": (
        "Is the engine up (up == 0, restarts, OOM kills)? Read the container status and the engine log.",
        "Which dependency fails? Connection pools (database, vector store) exhausted, DNS, an external API's limits.",
        "Switch to the degradation plan: 1) drop RAG, plain LLM; 2) structured FAQ, no LLM; 3) the static page.",
        "After recovery, run the degradation drill again so the fallback path is known to work.",
    ),
    "prompt_rejection": (
        "Input quality worsening: which rejection reasons rose (too long, invalid, blocked by the injection filter)?",
        "Prompt length distribution shifted? A client may be sending whole documents or unbounded history.",
        "A client or template change (malformed requests, a new field)? Compare with the last deploy.",
    ),
}


def golden_alerts(name: str, opts: AlertOptions) -> list[dict[str, Any]]:
    """The method's five golden alerts, each with its own ``for:``, severity and root-cause runbook.

    The LLM P99 reads the engine's E2E histogram; vector search the ``retrieval`` histogram of
    :attr:`AlertOptions.layer_metrics` (default ``vector_search_duration_seconds``); OOM errors
    :attr:`AlertOptions.oom_metric`; unavailability the 5xx share of ``http_requests_total``; prompt rejection its
    400/413/422 share.
    """
    base = _camel(name)
    labels = {"contract": name, "golden": "true"}
    w = opts.window
    vector = dict(opts.layer_metrics).get("retrieval", "vector_search_duration_seconds")
    total = f"sum(rate(http_requests_total{_sel(opts)}[{w}]))"
    rejected_sel = _sel(opts, 'status=~"400|413|422"')
    unavailable_sel = _sel(opts, 'status=~"5..|5xx"')
    rejected = f"sum(rate(http_requests_total{rejected_sel}[{w}]))"
    unavailable = f"sum(rate(http_requests_total{unavailable_sel}[{w}]))"
    return [
        _alert(
            f"{base}LlmP99LatencyHigh",
            f"{_quantile_expr('e2e_ms', 'p99', opts)} > 1.2",
            "page",
            f"LLM P99 latency above 1.2 s ({name})",
            f"LLM request P99 is {{{{ $value | humanizeDuration }}}} over the last {w} (golden limit 1.2 s).",
            GOLDEN_CHECKLISTS["llm_p99"],
            opts,
            "2m",
            notify="phone",
            **labels,
        ),
        _alert(
            f"{base}VectorSearchP999High",
            f"{_layer_quantile(vector, 'p999', opts)} > 0.2",
            "warning",
            f"vector search P99.9 above 200 ms ({name})",
            f"vector search P99.9 ({vector}) is {{{{ $value | humanizeDuration }}}} over the last {w}.",
            GOLDEN_CHECKLISTS["vector_search"],
            opts,
            "1m",
            notify="chat",
            **labels,
        ),
        _alert(
            f"{base}LlmOutOfMemory",
            f"sum(increase({opts.oom_metric}{_sel(opts)}[5m])) > 0",
            "page",
            f"the LLM service ran out of memory ({name})",
            f"{{{{ $value }}}} out-of-memory errors ({opts.oom_metric}) within the last 5m.",
            GOLDEN_CHECKLISTS["oom"],
            opts,
            "0s",
            notify="phone",
            **labels,
        ),
        _alert(
            f"{base}ServiceUnavailable",
            f"({unavailable} or vector(0)) / {total} > 0.01",
            "page",
            f"more than 1 % of requests unavailable ({name})",
            f"{{{{ $value | humanizePercentage }}}} of requests failed with 5xx over the last {w}.",
            GOLDEN_CHECKLISTS["unavailable"],
            opts,
            "30s",
            notify="phone",
            **labels,
        ),
        _alert(
            f"{base}PromptRejectionRateHigh",
            f"({rejected} or vector(0)) / {total} > 0.05",
            "warning",
            f"more than 5 % of prompts rejected ({name}): input quality is getting worse",
            f"{{{{ $value | humanizePercentage }}}} of requests were rejected (400/413/422) over the last {w}.",
            GOLDEN_CHECKLISTS["prompt_rejection"],
            opts,
            "1m",
            notify="chat",
            **labels,
        ),
    ]


def golden_rules(opts: AlertOptions | None = None, name: str = "golden") -> AlertRules:
    """A rule file holding only the method's five golden alerts (and the golden-signal recording rules)."""
    o = opts or AlertOptions()
    contract = Contract(name=name)
    slug = _slug(name)
    doc = {
        "groups": [
            {"name": f"tailscope-{slug}-recording", "rules": _recordings(contract, o)},
            {"name": f"tailscope-{slug}-alerts", "rules": golden_alerts(name, o)},
        ]
    }
    return AlertRules(document=doc)


def alert_rules(contract: Contract, opts: AlertOptions | None = None, *, golden: bool = False) -> AlertRules:
    """The Prometheus rule file for ``contract`` (two groups: recording rules, then alerts), with the method's golden
    alerts added when ``golden``."""
    o = opts or AlertOptions()
    slug = _slug(contract.name)
    alerts: list[dict[str, Any]] = []
    skipped: list[str] = []
    for s in contract.slos:
        if s.request_class is not None:
            skipped.append(f"{s.name}: engine metrics carry no request class; gate it with `tailscope gate`")
            continue
        rule = _slo_alert(contract, s, o)
        if rule is None:
            skipped.append(f"{s.name}: no engine metric for this statistic; gate it with `tailscope gate`")
        else:
            alerts.append(rule)
    layer_metrics = dict(o.layer_metrics)
    for lay in contract.layers:
        if lay.layer in layer_metrics:
            alerts.append(_layer_alert(contract, lay, layer_metrics[lay.layer], o))
        else:
            skipped.append(
                f"{lay.name}: no histogram of {lay.layer} durations is known; name one with "
                f"--layer-metric {lay.layer}=HISTOGRAM (e.g. a span-metrics histogram), or gate it on traces with "
                "`tailscope gate --traces SET`"
            )
    alerts += _saturation_alerts(contract, o)
    if golden:
        alerts += golden_alerts(contract.name, o)
    doc = {
        "groups": [
            {"name": f"tailscope-{slug}-recording", "rules": _recordings(contract, o)},
            {"name": f"tailscope-{slug}-alerts", "rules": alerts},
        ]
    }
    return AlertRules(document=doc, skipped=tuple(skipped))
