"""``tailscope translate``: a peer's command line as a tailscope profile and bench flags (parse, call, render)."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli.common import command_app, verbatim

app = command_app()

_HELP = verbatim("""Turn a vLLM bench, GuideLLM or AIPerf command line into an equivalent tailscope profile, with every
semantic difference stated (default rate, range ratio, warmup, what TTFT is timed from). A flag with no faithful
equivalent is refused by name.

Examples:

  tailscope translate --from vllm -- --backend openai-chat --endpoint /v1/chat/completions --model m \\
      --dataset-name random --random-input-len 512 --random-output-len 128 --request-rate 4 --num-prompts 200

  tailscope translate --from guidellm --out p.yaml -- --target http://h:8000 --rate-type constant --rate 5 \\
      --data prompt_tokens=256,output_tokens=128 --max-requests 300

  tailscope translate --from aiperf -- -m m --url h:8000 --endpoint-type chat --streaming --concurrency 8 \\
      --isl 512 --osl 128 --request-count 100
""")


@app.command(help=_HELP)
def translate(
    args: list[str] = typer.Argument(..., help="The peer's arguments (after --)."),
    tool: str = typer.Option(..., "--from", help="vllm (bench serve), guidellm (benchmark) or aiperf (profile)."),
    out: Path | None = typer.Option(None, "--out", help="Write the profile YAML here (default: print it)."),
) -> None:
    import yaml

    from tailscope.api.peers import translate_command
    from tailscope.cli.common import write_text
    from tailscope.report.peers_console import translation_text

    result = translate_command(tool, list(args))
    text = yaml.safe_dump(result.profile, sort_keys=False, default_flow_style=None, width=120)
    if out is not None:
        write_text(out, text, "--out")
    shown = str(out) if out is not None else None
    typer.echo(translation_text(result.tool, text, result.command(shown or "profile.yaml"), list(result.differences),
                                list(result.ignored), shown), nl=False)  # fmt: skip
