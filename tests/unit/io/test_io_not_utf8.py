"""A file that is not UTF-8 text gives one clear line naming the file and the line, never a traceback.

Each user file kind is fed through the command that reads it (the loaders move between modules; the promise is the
command's). The bad byte sits on line 2 of every file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.cli.main import main

# (kind, file name, content with one bad byte on line 2, the command line with {f} for the file, {db} for a store)
CASES = [
    ("profile", "p.yaml", b"name: x\n# caf\xe9\n", "bench --profile {f} --db {db}"),
    ("replay", "r.jsonl", b'{"timestamp_s": 0}\n\xff\n', "bench --replay {f} --db {db}"),
    ("dataset", "d.jsonl", b'{"prompt": "a"}\n{"prompt": "\xe9"}\n', "bench --dataset jsonl:{f} --db {db}"),
    (
        "calibration",
        "c.yaml",
        b"default: {}\n# \xe9\n",
        "sim --model llama-3.1-8b -n 5 -r 2 --calibration {f} --db {db}",
    ),
    (
        "autoscale",
        "a.yaml",
        b"metric: running\n# \xe9\n",
        "sim --model llama-3.1-8b -n 5 -r 2 --autoscale {f} --db {db}",
    ),
    ("gpus", "g.yaml", b"gpus:\n  - id: x # \xe9\n", "catalog gpus --gpu-file {f}"),
    ("model", "config.json", b'{"a": 1,\n"b": "\xe9"}', "plan kv --context 9 --model {f}"),
    pytest.param("contract", "k.yaml", b"name: c\n# \xe9\n", "gate {f} --run latest --db {db}"),
]
IDS = ["profile", "replay", "dataset", "calibration", "autoscale", "gpus", "model", "contract"]


@pytest.mark.parametrize(("kind", "name", "content", "command"), CASES, ids=IDS)
def test_not_utf8_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, name: str, content: bytes, command: str
) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    argv = command.format(f=f, db=tmp_path / "db.duckdb").split()
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert info.value.code not in (0, None), kind
    assert err.splitlines() == [err], f"{kind}: more than one line: {err!r}"
    assert err.startswith(f"tailscope: error: {f}:2: "), err
    assert "not UTF-8" in err, err
