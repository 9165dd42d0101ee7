"""The bench flags the library declares (:mod:`tailscope.runner.flags`): one per BenchOptions field a command line
sets, each with the field's default, and ``tailscope bench`` offers every one of them."""

from __future__ import annotations

import typer

from tailscope.cli.main import app
from tailscope.runner.flags import BENCH_FLAGS, pick
from tailscope.runner.options import DEFAULTS, BenchOptions


def test_every_field_but_the_store_has_a_flag() -> None:
    assert set(BENCH_FLAGS) == set(BenchOptions.field_names()) - {"traces_db"}


def test_a_flag_defaults_to_its_field_or_the_documented_default() -> None:
    plain = BenchOptions()
    for name, flag in BENCH_FLAGS.items():
        expected = DEFAULTS[name] if name in DEFAULTS else getattr(plain, name)
        assert flag.default == expected, name
        assert flag.decls.split()[0].startswith("--"), name


def test_bench_offers_every_declared_flag() -> None:
    group = typer.main.get_command(app)
    bench = group.get_command(typer.Context(group), "bench")
    params = {p.name: p for p in bench.params}
    for name, flag in BENCH_FLAGS.items():
        assert name in params, name
        assert [*params[name].opts, *params[name].secondary_opts] == flag.decls.replace("/", " ").split(), name
        assert params[name].help == flag.help


def test_pick_changes_a_default_for_another_command() -> None:
    (out,) = pick("output_tokens", output_tokens={"default": "64"})
    assert (out.default, out.decls) == ("64", "--output-tokens")
    assert BENCH_FLAGS["output_tokens"].default == "128"
