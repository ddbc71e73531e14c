"""Where the data directory is when ``[data] dir`` is left empty.

``./data`` when the working directory holds a ``config.toml`` or a ``data/`` directory
(a project directory, such as a checkout used with ``make run``), else the platform's
user data directory (``~/.local/share/picobot`` on Linux, per XDG_DATA_HOME), so
``picobot`` finds the same database from any other directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "picobot"
LOCAL_DATA_DIR = "data"
LOCAL_MARKERS = ("config.toml", LOCAL_DATA_DIR)
"""Either of these in the working directory keeps the data in ``./data``."""


@dataclass(frozen=True, slots=True)
class DataLocation:
    """The data directory in use and why PicoBot chose it (for ``picobot status``)."""

    path: Path
    reason: str

    def describe(self) -> str:
        """``<path> (<reason>)``."""
        return f"{self.path} ({self.reason})"


def locate_data_dir(configured: str, cwd: Path | None = None) -> DataLocation:
    """The data directory for ``[data] dir`` = ``configured``, seen from ``cwd``."""
    if configured:
        return DataLocation(Path(configured), "[data] dir")
    here = Path.cwd() if cwd is None else cwd
    for marker in LOCAL_MARKERS:
        if (here / marker).exists():
            return DataLocation(Path(LOCAL_DATA_DIR), f"./{marker} is in the working directory")
    path = platformdirs.user_data_path(APP_NAME, appauthor=False)
    return DataLocation(path, "the user data directory: no ./config.toml or ./data here")
