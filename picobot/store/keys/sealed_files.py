"""Files sealed with their owner's key, in chunks: an export waiting to be sent.

A sealed file is :data:`MAGIC`, then chunks: a 4-byte big-endian length and a chunk
sealed by :meth:`Sealer.seal_chunk` holding at most :data:`CHUNK` bytes of the file.
Once its owner's key is deleted (a user purge) the file cannot be read, by PicoBot or
from a copy of the disk. Written without a key store, a file is plain (no
:data:`MAGIC`) and read as it is.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from picobot.store.keys.sealing import SEALED_OVERHEAD, Sealer

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

MAGIC = b"PBSEAL1\n"
"""The first bytes of a sealed file."""
CHUNK = 64 * 1024
"""Most bytes of the file one sealed chunk holds."""
_LENGTH = 4


class KeyGone(FileNotFoundError):
    """The file's key was deleted: its content is gone for good."""


class _ChunkWriter(io.RawIOBase):
    """Seals what is written to it, :data:`CHUNK` bytes at a time, into ``out``."""

    def __init__(self, out: BinaryIO, sealer: Sealer, user_id: str) -> None:
        self._out = out
        self._sealer = sealer
        self._user_id = user_id
        self._pending = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        view = memoryview(data).cast("B")
        self._pending += view
        while len(self._pending) >= CHUNK:
            self._emit(bytes(self._pending[:CHUNK]))
            del self._pending[:CHUNK]
        return len(view)

    def close(self) -> None:
        if not self.closed:
            try:
                if self._pending:
                    self._emit(bytes(self._pending))
                    self._pending.clear()
            finally:
                self._out.close()
        super().close()

    def _emit(self, chunk: bytes) -> None:
        sealed = self._sealer.seal_chunk(self._user_id, chunk)
        self._out.write(len(sealed).to_bytes(_LENGTH, "big") + sealed)


@contextmanager
def sealed_text_file(path: Path, sealer: Sealer, user_id: str) -> Iterator[TextIO]:
    """``path`` opened for UTF-8 text that reaches the disk sealed with ``user_id``'s key
    (plain without a key store); the file is complete when the block ends."""
    if not sealer.keyed:
        with path.open("w", encoding="utf-8") as plain:
            yield plain
        return
    out = path.open("wb")
    out.write(MAGIC)
    text = io.TextIOWrapper(io.BufferedWriter(_ChunkWriter(out, sealer, user_id), CHUNK), "utf-8")
    with text:
        yield text


def _chunks(data: bytes) -> Iterator[bytes]:
    pos = len(MAGIC)
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + _LENGTH], "big")
        pos += _LENGTH
        yield data[pos : pos + size]
        pos += size


def read_sealed(path: Path, sealer: Sealer) -> bytes:
    """The bytes of a file written by :func:`sealed_text_file`, opened in memory only.

    Raises FileNotFoundError when the file is gone and :class:`KeyGone` when it cannot
    be opened any more (its owner's key was deleted, or the file was damaged).
    """
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        return data
    plain = bytearray()
    for blob in _chunks(data):
        chunk = sealer.open_chunk(blob)
        if chunk is None:
            raise KeyGone(f"{path.name} cannot be opened: its key is gone")
        plain += chunk
    return bytes(plain)


def open_sealed(path: Path, sealer: Sealer) -> BinaryIO:
    """:func:`read_sealed` as a file object (for an upload)."""
    return io.BytesIO(read_sealed(path, sealer))


def clear_size(path: Path) -> int:
    """How many bytes the file holds once opened (read from its chunks' lengths).

    Raises FileNotFoundError when the file is gone.
    """
    with path.open("rb") as file:
        if file.read(len(MAGIC)) != MAGIC:
            return path.stat().st_size
        size = 0
        while header := file.read(_LENGTH):
            length = int.from_bytes(header, "big")
            size += max(0, length - SEALED_OVERHEAD)
            file.seek(length, io.SEEK_CUR)
        return size
