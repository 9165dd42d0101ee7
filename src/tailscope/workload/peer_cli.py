"""What every peer's translation shares: the argument reader (:class:`PeerArgs`), the result
(:class:`Translation`) and its assembly (:func:`finish`: leftover flags ignored by name or refused), and the profile
pieces (a length range, the single request class)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tailscope.errors import ConfigError

_TTFT = {
    "vllm": "vLLM times TTFT from the send (perf_counter before the POST); tailscope from the intended send time, so a "
    "late client (or, closed loop, nothing) adds to it — compare with `runs show --dialect vllm`.",
    "guidellm": "GuideLLM times TTFT from request_start (the backend's send); tailscope from the intended send time — "
    "compare with `runs show --dialect guidellm`.",
    "aiperf": "AIPerf times TTFT from request_start_ns (the send); tailscope from the intended send time — compare "
    "with `runs show --dialect aiperf`.",
}
_ITL = {
    "vllm": "vLLM's ITL is every gap between SSE chunks pooled over requests; tailscope's ITL is per token "
    "(docs/metrics.md) and its ICL per chunk; vLLM's TPOT = tailscope's TPOT.",
    "guidellm": "GuideLLM's TPOT includes the first token ((last token − start)/N) and its ITL is (last − first)/"
    "(N − 1), tailscope's TPOT.",
    "aiperf": "AIPerf's ITL is the per-request (latency − TTFT)/(OSL − 1), tailscope's TPOT; AIPerf's ICL is "
    "tailscope's ICL.",
}


@dataclass(frozen=True, slots=True)
class Translation:
    """A peer's command line as tailscope sees it.

    Attributes:
        profile: a workload profile (docs/workload.md schema) ready to be written as YAML.
        flags: bench flags the profile cannot hold (``--url``, ``--dataset``, ``--no-ignore-eos``).
        differences: every semantic difference between the peer's run and tailscope's.
        ignored: the peer's flags that only choose its output or display (named, with why).
    """

    tool: str
    args: tuple[str, ...]
    profile: dict[str, Any]
    flags: tuple[str, ...] = ()
    differences: tuple[str, ...] = ()
    ignored: tuple[str, ...] = field(default_factory=tuple)

    def command(self, profile_path: str = "profile.yaml") -> str:
        """The tailscope command line that runs the translation."""
        return shlex.join(["tailscope", "bench", "--profile", profile_path, *self.flags])


class PeerArgs:
    """``--flag value`` / ``--flag=value`` / ``-f value`` / bare ``--switch`` pairs in order."""

    def __init__(self, tool: str, argv: list[str], switches: set[str]) -> None:
        self.tool = tool
        self.items: list[tuple[str, str | None]] = []
        i = 0
        while i < len(argv):
            tok = argv[i]
            if not tok.startswith("-"):
                raise ConfigError(
                    f"{tool}: {tok!r}: expected a flag (--name value); positional arguments are not translated"
                )
            if "=" in tok:
                name, value = tok.split("=", 1)
                self.items.append((name, value))
            elif tok in switches or i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                self.items.append((tok, None))
            else:
                self.items.append((tok, argv[i + 1]))
                i += 1
            i += 1
        self.used: set[int] = set()

    def refuse(self, flag: str, why: str) -> ConfigError:
        """The error that names ``flag`` and why it has no faithful equivalent (to raise)."""
        return ConfigError(f"{self.tool} {flag}: cannot be translated — {why}")

    def get(self, *names: str) -> str | None:
        """The last value given under any of ``names`` (``"true"`` for a bare switch), marking them used."""
        found = None
        for k, (name, value) in enumerate(self.items):
            if name in names:
                self.used.add(k)
                found = value if value is not None else "true"
        return found

    def num(self, *names: str, cast: Callable[[str], Any] = float) -> Any:
        """:meth:`get` as a number (``cast``); ``None`` when absent."""
        raw = self.get(*names)
        if raw is None:
            return None
        try:
            return cast(raw)
        except ValueError:
            raise ConfigError(f"{self.tool} {names[0]} {raw!r}: expected a number") from None

    def leftovers(self) -> list[str]:
        """The flags no translation step read."""
        return [name for k, (name, _v) in enumerate(self.items) if k not in self.used]


def finish(
    tool: str,
    a: PeerArgs,
    argv: list[str],
    profile: dict[str, Any],
    flags: list[str],
    diffs: list[str],
    ignorable: dict[str, str],
) -> Translation:
    """The translation, once every leftover flag is listed as ignored (``ignorable``: flag → why) or refused."""
    ignored = []
    for flag in a.leftovers():
        if flag in ignorable:
            ignored.append(f"{flag}: {ignorable[flag]}")
            continue
        raise a.refuse(flag, "no tailscope equivalent; remove it or set the workload by hand (docs/workload.md)")
    diffs = [_TTFT[tool], _ITL[tool], *diffs]
    return Translation(tool, tuple(argv), profile, tuple(flags), tuple(diffs), tuple(ignored))


def length_range(base: float, ratio: float) -> dict[str, Any]:
    """A token-length distribution: ``base`` fixed, or uniform in ``[base·(1−ratio), base·(1+ratio)]``."""
    if ratio <= 0:
        return {"dist": "fixed", "value": int(base)}
    return {"dist": "uniform", "min": max(1, int(base * (1 - ratio))), "max": int(base * (1 + ratio))}


def default_class(inp: dict[str, Any], out: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The profile's one request class (``extra``: request body fields such as temperature)."""
    cls: dict[str, Any] = {"name": "default", "input_tokens": inp, "output_tokens": out}
    if extra:
        cls["extra_body"] = extra
    return cls
