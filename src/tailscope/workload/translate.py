"""A peer's command line as a tailscope workload: ``tailscope translate --from vllm|guidellm|aiperf -- ARGS…``.

Pure: takes the arguments (after ``vllm bench serve``, ``guidellm benchmark`` or ``aiperf profile``) and returns a
profile (a dict in the schema of docs/workload.md), the bench flags a profile cannot hold (``--dataset``, ``--url``)
and every semantic difference between what the peer would have done and what tailscope will do: default rates,
length ranges, warmup, what TTFT is timed from. A flag with no faithful equivalent is refused by name, never
dropped silently; flags that only choose the peer's output files or display are listed as ignored.
"""

from __future__ import annotations

from tailscope.errors import ConfigError
from tailscope.workload.peer_cli import Translation as Translation  # the result's public home (tailscope.Translation)
from tailscope.workload.translate_aiperf import aiperf_translation
from tailscope.workload.translate_guidellm import guidellm_specs, guidellm_translation
from tailscope.workload.translate_vllm import vllm_translation

TOOLS = ("vllm", "guidellm", "aiperf")


def translate(tool: str, args: list[str]) -> Translation:
    """Translate ``args`` of ``tool`` (vllm, guidellm or aiperf).

    Raises:
        ConfigError: an unknown tool, or ``TOOL --flag: cannot be translated — why`` for the first flag that has no
            faithful tailscope equivalent.
    """
    name = tool.strip().lower()
    if name not in TOOLS:
        raise ConfigError(f"--from {tool!r}: use one of {', '.join(TOOLS)}")
    argv = list(args)
    if name == "vllm" and argv[:2] == ["bench", "serve"]:
        argv = argv[2:]
    if name == "guidellm" and argv[:1] == ["benchmark"]:
        argv = argv[1:]
    if name == "guidellm" and (argv[:1] == ["run"] or any(a.startswith("kind=") for a in argv)):
        argv = guidellm_specs(argv[1:] if argv[:1] == ["run"] else argv)
    if name == "aiperf" and argv[:1] == ["profile"]:
        argv = argv[1:]
    fn = {"vllm": vllm_translation, "guidellm": guidellm_translation, "aiperf": aiperf_translation}[name]
    return fn(argv)
