"""The master key: where it comes from, and its file made safely.

The master key wraps every user key in the key store (:mod:`.keyring`). It is 32 random
bytes written as 44 characters of URL-safe base64. Sources, first that is set:
``PICOBOT_MASTER_KEY``, ``[keys] master_key_file``, ``<data dir>/master.key`` (created
with mode 0600 only when no key store exists yet, so a lost key file is an error, never
a fresh key over existing data).
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from picobot.errors import ConfigError

KEY_BYTES = 32
DEFAULT_KEY_FILE = "master.key"
PENDING_SUFFIX = ".new"
"""A rotation writes the new key beside the old one under this suffix first."""


@dataclass(frozen=True)
class MasterKey:
    """The key itself and where it came from (named in errors, never the key)."""

    key: bytes
    source: str
    path: Path | None = None
    """The file it was read from; None for the environment variable."""


def new_key() -> bytes:
    """32 random bytes from the operating system's CSPRNG."""
    return secrets.token_bytes(KEY_BYTES)


def encode_key(key: bytes) -> str:
    """The text form of a key: URL-safe base64, 44 characters."""
    return base64.urlsafe_b64encode(key).decode("ascii")


def decode_key(text: str, source: str) -> bytes:
    """A key from its text form; ConfigError naming ``source`` if it is not one."""
    try:
        key = base64.urlsafe_b64decode(text.strip().encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise ConfigError(
            f"{source} is not a PicoBot master key: expected {KEY_BYTES} bytes as URL-safe"
            " base64 (44 characters), e.g. from `picobot keys new`"
        )
    return key


def read_key_file(path: Path) -> MasterKey:
    """The key in ``path``; ConfigError if it cannot be read or is not a key."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise ConfigError(f"master key file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read master key file {path}: {exc}") from None
    return MasterKey(decode_key(text, f"master key file {path}"), str(path), path)


def write_key_file(path: Path, key: bytes) -> None:
    """Write ``key`` to a new file readable by this account only (0600), durably.

    Refuses to replace an existing file: a key file is never overwritten in place.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (encode_key(key) + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory so a file created or renamed in it survives a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def key_file_path(data_dir: Path, configured: str) -> Path:
    """The key file used when the environment variable is not set."""
    return Path(configured) if configured else data_dir / DEFAULT_KEY_FILE


def load_master_key(
    env_value: str | None, key_file: Path, *, default_file: bool, may_create: bool
) -> MasterKey:
    """The master key from the first source that is set.

    ``default_file``: ``key_file`` is PicoBot's own ``<data dir>/master.key`` (not an
    operator's secrets file), which may be created when ``may_create`` (no key store
    exists yet). Anything else missing or malformed is a ConfigError.
    """
    if env_value:
        return MasterKey(decode_key(env_value, "PICOBOT_MASTER_KEY"), "PICOBOT_MASTER_KEY")
    if default_file and may_create and not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key = new_key()
        write_key_file(key_file, key)
        return MasterKey(key, str(key_file), key_file)
    return read_key_file(key_file)
