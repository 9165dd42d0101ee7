"""Where the calibration corpus lies: ``shared/calibration`` (``silicon_dev.csv``, ``model_configs/``) is not in the
repository; tests, benchmarks and the developer scripts find it next to the checkout, or where
``TAILSCOPE_CALIBRATION_DIR`` points.

Example::

    from tailscope.testing.calibration import find_corpus

    path = find_corpus(__file__)  # None: no corpus here; skip or ask for --csv
"""

from __future__ import annotations

import os
from pathlib import Path

#: the environment variable that names the calibration folder (it wins over the search)
ENV = "TAILSCOPE_CALIBRATION_DIR"
#: the corpus file in that folder
CORPUS = "silicon_dev.csv"


def calibration_dir(near: str | os.PathLike[str]) -> Path | None:
    """The calibration folder: ``$TAILSCOPE_CALIBRATION_DIR`` when set (``None`` when it is not a folder), else the
    first ``shared/calibration`` folder in ``near`` or one of its parents.

    Args:
        near: a file or folder of the checkout (a script passes its own ``__file__``).
    """
    env = os.environ.get(ENV)
    if env:
        return Path(env) if Path(env).is_dir() else None
    start = Path(near).resolve()
    for parent in (start, *start.parents):
        cand = parent / "shared" / "calibration"
        if cand.is_dir():
            return cand
    return None


def find_corpus(near: str | os.PathLike[str]) -> Path | None:
    """``silicon_dev.csv`` in :func:`calibration_dir`'s folder, or ``None`` when there is none."""
    folder = calibration_dir(near)
    if folder is None or not (folder / CORPUS).is_file():
        return None
    return folder / CORPUS
