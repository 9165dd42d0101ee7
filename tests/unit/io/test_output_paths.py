"""Output paths (issue 26): a file's own folder is created, never a chain of missing folders or one at the root, and
an unwritable path is refused before any work, naming the flag and the first missing folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.errors import ConfigError
from tailscope.files import check_output, make_folder, write_text


def test_the_files_own_folder_is_created(tmp_path: Path) -> None:
    write_text(tmp_path / "reports" / "run.json", "{}", "--json")
    assert (tmp_path / "reports" / "run.json").read_text() == "{}"


def test_a_chain_of_missing_folders_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "run.json"
    with pytest.raises(ConfigError, match=rf"^--json {target}: folder {tmp_path / 'a'} does not exist; create it"):
        write_text(target, "{}", "--json")
    assert not (tmp_path / "a").exists()  # nothing created on the way


def test_never_a_folder_at_the_root() -> None:
    with pytest.raises(ConfigError, match=r"^--out /tailscope-no-such-dir/x: folder /tailscope-no-such-dir does not"):
        make_folder(Path("/tailscope-no-such-dir"), "--out", "/tailscope-no-such-dir/x")
    assert not Path("/tailscope-no-such-dir").exists()


def test_checked_before_any_work(tmp_path: Path) -> None:
    check_output(None, "--json")
    check_output("-", "--json")  # standard output
    check_output(tmp_path / "new" / "x.json", "--json")  # one level short: created when written
    assert not (tmp_path / "new").exists()  # the check creates nothing
    with pytest.raises(ConfigError, match="is a folder"):
        check_output(tmp_path, "--html")
    with pytest.raises(ConfigError, match="does not exist"):
        check_output(tmp_path / "a" / "b" / "x.json", "--json")


def test_a_file_where_the_folder_should_be(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"cannot write it \(.*file is a file, not a folder\)"):
        write_text(tmp_path / "file" / "r.json", "{}", "--json")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_output(tmp_path / "file" / "r.json", "--json")  # before any work
