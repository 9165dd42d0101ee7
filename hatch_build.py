"""Build hook: compiles the client's optional hot loop (``src/tailscope/client/_hot.c``) when it can.

A wheel gets the extension as ``tailscope/client/_hot<EXT_SUFFIX>`` and a platform tag; an editable install
(``pip install -e .``, what ``make`` does) builds it in place next to its source. Where it cannot be built — not Linux,
no C compiler, no Python headers, or ``TAILSCOPE_BUILD_PURE=1`` — the install goes on without it and the client runs
its pure-Python twin (same records; docs/metrics.md, "The compiled hot loop"). Never fails an install.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src/tailscope/client/_hot.c")


def source_digest(path: Path) -> str:
    """The first 16 hex digits of the source's SHA-256: compiled in, compared by ``tailscope.client.hot``."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def compile_extension(src: Path, out: Path) -> str | None:
    """Compile ``src`` into the extension module ``out``; ``None`` on success, else why not (one line)."""
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    ldshared = sysconfig.get_config_var("LDSHARED") or "cc -shared"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        return f"no Python headers at {include} (Debian: python3-dev)"
    cmd = [
        *shlex.split(ldshared),
        "-O2",
        "-fPIC",
        "-Wall",
        f"-DHOT_SOURCE_DIGEST=\"{source_digest(src)}\"",
        f"-I{include}",
        str(src),
        "-o",
        str(out),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cmd[0]}: {exc}"
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return f"{cmd[0]} exited {proc.returncode}: {lines[0] if lines else ''}"
    return None


class HotLoopBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("TAILSCOPE_BUILD_PURE") == "1":
            return
        root = Path(self.root)
        src = root / SOURCE
        if not src.exists():
            return
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        if version == "editable":
            out = src.with_name(f"_hot{suffix}")
        else:
            out = Path(tempfile.mkdtemp(prefix="tailscope-hot-")) / f"_hot{suffix}"
        why = compile_extension(src, out)
        if why is not None:
            self.app.display_warning(
                f"tailscope: the compiled hot loop was not built ({why}); the pure-Python one runs"
            )
            return
        if version != "editable":
            build_data["force_include"][str(out)] = f"tailscope/client/_hot{suffix}"
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
