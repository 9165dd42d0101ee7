"""The doc extractor: fences with their directives, shell blocks split into commands, synopses told from commands."""

from __future__ import annotations

from tailscope.testing import docblocks

PAGE = """Intro.

<!-- doctest: skip needs vLLM -->
<!-- doctest: exit 1 -->
```
tailscope serve --port 8000 &          # the server
tailscope bench --url http://127.0.0.1:8000 \\
    --requests 20 && tailscope runs list   # two
kill %1
```

```yaml
a: 1
```

```
$ tailscope plan kv --model m
 KV bytes per token   131,072 B
$ tailscope plan budget --target 2s
✗ over                                   (exit 1)
```
"""


def test_blocks_carry_the_directives_above_them() -> None:
    blocks = docblocks.blocks(PAGE)
    assert [(b.line, b.lang) for b in blocks] == [(5, ""), (12, "yaml"), (16, "")]
    assert blocks[0].directive("skip") == "needs vLLM"
    assert blocks[0].directive("exit") == "1"
    assert blocks[1].directive("skip") is None
    assert [docblocks.is_shell_block(b) for b in blocks] == [True, False, True]


def test_commands_join_split_and_mark_background_jobs() -> None:
    block = docblocks.blocks(PAGE)[0]
    cmds = docblocks.commands(block.text, block.line + 1)
    assert [(c.line, c.text, c.background) for c in cmds] == [
        (6, "tailscope serve --port 8000", True),
        (7, "tailscope bench --url http://127.0.0.1:8000 --requests 20", False),
        (7, "tailscope runs list", False),
        (9, "kill %1", False),
    ]


def test_prompted_blocks_separate_commands_from_output_and_exit_notes() -> None:
    block = docblocks.blocks(PAGE)[2]
    kv, budget = docblocks.commands(block.text, block.line + 1)
    assert kv.text == "tailscope plan kv --model m"
    assert kv.output == (" KV bytes per token   131,072 B",)
    assert kv.expect is None
    assert budget.expect == 1


def test_comments_inside_quotes_are_kept() -> None:
    (cmd,) = docblocks.commands("""tailscope bench --slo 'a#b' --tag "x # y"   # a comment""")
    assert cmd.text == """tailscope bench --slo 'a#b' --tag "x # y\""""


def test_synopses_are_not_commands() -> None:
    assert docblocks.runnable_form("tailscope trace analyze --set before [--json out.json]") == (
        "tailscope trace analyze --set before"
    )
    assert docblocks.runnable_form("tailscope report RUN_ID --out r.html") == "tailscope report latest --out r.html"
    assert docblocks.runnable_form("tailscope trace show TRACE_ID") is None
    assert docblocks.runnable_form("tailscope alerts [contract.yaml] --out rules.yaml") is None  # optional argument
    assert docblocks.runnable_form("tailscope runs export RUN --format parquet|csv --out f") is None
    assert docblocks.runnable_form("tailscope bench --url … -n 300") is None
    assert docblocks.runnable_form("[--seed N] [--db PATH]") is None


def test_inline_commands_come_from_prose_only() -> None:
    text = "Run `tailscope bench --url X` now.\n```\ntailscope runs list\n```\nThen `tailscope gate c.yaml`.\n"
    assert docblocks.inline_commands(text) == [(1, "tailscope bench --url X"), (5, "tailscope gate c.yaml")]


def test_a_block_that_starts_with_a_comment_is_still_a_shell_block() -> None:
    (block,) = docblocks.blocks("```\n# measure\ntailscope bench --requests 5\n```\n")
    assert docblocks.is_shell_block(block)
