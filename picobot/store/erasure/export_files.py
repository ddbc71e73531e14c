"""A user's own export files (``/export`` in the terminal UI and on messaging
platforms), under the data directory.

Each file is ``<data dir>/exports/export-<user key>-<time>.jsonl``, created 0600 in a
0700 directory; the user key is a hash of the user id, so the name holds no user id.
They are the user's data: a user purge deletes that user's files, and retention deletes
every file older than the retention cutoff or than ``EXPORT_FILE_TTL_SECS``, whichever
comes first. A file queued as a platform document is named in the reply queue by its
name only (:func:`export_file` finds it again) and is deleted once it is sent or given
up on, or with its queued reply.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

EXPORT_FILE_TTL_SECS = 24 * 3600.0
"""How long an export file is kept at most (retention deletes it after that)."""
_DIR = "exports"
_NAME = re.compile(r"export-[0-9a-f]{24}-([0-9]{8}T[0-9]{6}Z)(?:-[0-9]{1,2})?\.jsonl")
"""The name of an export file; the group is its time stamp."""


def export_dir(data_dir: Path) -> Path:
    """Where the export files of a database in ``data_dir`` live."""
    return data_dir / _DIR


def user_key(user_id: str) -> str:
    """The part of a file name that names its user (a hash, not the id)."""
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:24]


def new_export_file(data_dir: Path, user_id: str, now: float) -> Path:
    """A new empty file (0600) for ``user_id``'s export; its parent made 0700 if needed."""
    folder = export_dir(data_dir)
    folder.mkdir(mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    for n in range(100):
        suffix = "" if n == 0 else f"-{n}"
        path = folder / f"export-{user_key(user_id)}-{stamp}{suffix}.jsonl"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        os.close(fd)
        return path
    raise FileExistsError(f"no free export file name in {folder}")


def export_file(data_dir: Path, name: str) -> Path | None:
    """The path of the export file called ``name``, or None when ``name`` is not the
    name of one (a path, say): a queued name can only ever point into ``exports/``."""
    if _NAME.fullmatch(name) is None:
        return None
    return export_dir(data_dir) / name


def shown_name(name: str) -> str:
    """What the user sees an export file called: ``picobot-export-<time>.jsonl`` (the
    stored name's user key is of no use to them)."""
    match = _NAME.fullmatch(name)
    return f"picobot-export-{match.group(1)}.jsonl" if match else "picobot-export.jsonl"


def delete_export_file(data_dir: Path, name: str) -> bool:
    """Delete the export file called ``name``; whether there was one."""
    path = export_file(data_dir, name)
    if path is None or not path.is_file():
        return False
    path.unlink(missing_ok=True)
    return True


def delete_user_files(data_dir: Path, user_id: str) -> int:
    """Delete ``user_id``'s export files (a user purge); how many."""
    folder = export_dir(data_dir)
    if not folder.is_dir():
        return 0
    gone = 0
    for path in folder.glob(f"export-{user_key(user_id)}-*.jsonl"):
        path.unlink(missing_ok=True)
        gone += 1
    return gone


def delete_files_before(data_dir: Path, cutoff_ts: float, now: float | None = None) -> int:
    """Delete the export files last written before ``cutoff_ts`` or older than
    ``EXPORT_FILE_TTL_SECS`` (retention); how many."""
    folder = export_dir(data_dir)
    if not folder.is_dir():
        return 0
    limit = max(cutoff_ts, (time.time() if now is None else now) - EXPORT_FILE_TTL_SECS)
    gone = 0
    for path in folder.glob("export-*.jsonl"):
        try:
            if path.stat().st_mtime < limit:
                path.unlink(missing_ok=True)
                gone += 1
        except FileNotFoundError:
            continue
    return gone
