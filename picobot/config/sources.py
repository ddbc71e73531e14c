"""Where variables come from: the process environment, a ``.env`` file, a secrets directory.

PicoBot reads ``PICOBOT_*`` settings and the secrets named by ``*_env`` keys from three
places, highest priority first: the process environment; the ``.env`` file
(``$PICOBOT_ENV_FILE``, default ``./.env``); the secrets directory
(``$PICOBOT_SECRETS_DIR``, default ``/run/secrets``), one file per variable, named like
the variable, as Docker and Kubernetes mount secrets. Why not pydantic-settings' own
sources: PicoBot must name the variable (and the file line) behind every problem, and
those sources report a bad value only as text.

A missing default ``.env`` or secrets directory is fine; one named by its variable must
exist, and one that exists but cannot be read is a :class:`ConfigError`. An empty
``PICOBOT_ENV_FILE`` or ``PICOBOT_SECRETS_DIR`` switches that source off.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from picobot.errors import ConfigError

PREFIX = "PICOBOT_"
CONFIG_ENV = "PICOBOT_CONFIG"
DEFAULT_CONFIG_FILE = "config.toml"
ENV_FILE_ENV = "PICOBOT_ENV_FILE"
SECRETS_DIR_ENV = "PICOBOT_SECRETS_DIR"
DEFAULT_ENV_FILE = ".env"
DEFAULT_SECRETS_DIR = "/run/secrets"
BOOTSTRAP = (CONFIG_ENV, ENV_FILE_ENV, SECRETS_DIR_ENV)
"""Variables that locate the other sources: read from the process environment only."""
REMOTE_KEY_ENV = "PICOBOT_WS_KEY"
"""Default of ``picobot tui --key-env``: the WebSocket key of a TUI attached to a server."""
MASTER_KEY_ENV = "PICOBOT_MASTER_KEY"
"""The master key of the key store (see picobot.config.keys), never a setting."""


def env_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """The ``.env`` file to read, or None: none named and no ``./.env``, or switched off."""
    return _located(environ, ENV_FILE_ENV, DEFAULT_ENV_FILE)


def secrets_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The secrets directory to read, or None: none named and no default, or switched off."""
    return _located(environ, SECRETS_DIR_ENV, DEFAULT_SECRETS_DIR)


def _located(environ: Mapping[str, str] | None, variable: str, default: str) -> Path | None:
    env = os.environ if environ is None else environ
    named = env.get(variable)
    if named == "":
        return None
    path = Path(named or default)
    if named and not path.exists():
        # A typo in the path must not drop every secret silently.
        raise ConfigError(f"{variable} names {path}, which does not exist")
    return path if path.exists() else None


@dataclass(frozen=True, slots=True)
class Variable:
    """One ``NAME=value`` pair and where it was found ("" = the process environment)."""

    name: str
    value: str
    origin: str = ""
    priority: int = 2
    """Which value wins: 2 the environment, 1 the ``.env`` file, 0 the secrets directory."""

    @property
    def label(self) -> str:
        """The name, and the file it came from unless that is the environment."""
        return f"{self.name} in {self.origin}" if self.origin else self.name


def gather(environ: Mapping[str, str] | None = None) -> list[Variable]:
    """Every ``PICOBOT_*`` variable of the three sources (each tells its priority).

    Raises :class:`ConfigError` for an unreadable source, a malformed ``.env`` line, or
    a bootstrap variable (``PICOBOT_CONFIG``...) outside the process environment, where
    it would come too late to take effect.
    """
    env = os.environ if environ is None else environ
    found: list[Variable] = []
    folder = secrets_dir(env)
    if folder is not None:
        found += _secret_files(folder)
    dotenv = env_file(env)
    if dotenv is not None:
        found += [var for var in parse_env_file(dotenv) if _picobot(var.name)]
    for var in found:
        if var.name.upper() in BOOTSTRAP:
            raise ConfigError(f"{var.label}: {var.name} is read from the process environment only")
    found += [Variable(name, value) for name, value in env.items() if _picobot(name)]
    return found


def read_secret(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The secret in variable ``name``, surrounding whitespace removed; "" if none holds one.

    Looks in the process environment, then the ``.env`` file, then the file ``name`` in
    the secrets directory: the same order as for settings. Every secret named by a
    ``*_env`` key is read here.
    """
    env = os.environ if environ is None else environ
    value = env.get(name, "").strip()
    if value:
        return value
    dotenv = env_file(env)
    if dotenv is not None:
        for var in reversed(parse_env_file(dotenv)):
            if var.name == name:
                return var.value.strip()
    folder = secrets_dir(env)
    if folder is not None and name in _listing(folder):
        return _read(folder / name).strip()
    return ""


def _picobot(name: str) -> bool:
    return name.upper().startswith(PREFIX)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start + 1})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _listing(folder: Path) -> list[str]:
    """The entries of the secrets directory, sorted; a ConfigError if it cannot be read."""
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        raise ConfigError(
            f"secrets directory {folder} cannot be read: {exc.strerror}"
            f" (set {SECRETS_DIR_ENV} to another directory, or to nothing to read none)"
        ) from None


def _secret_files(folder: Path) -> list[Variable]:
    # Only PICOBOT_* files are settings; others (e.g. OPENAI_API_KEY) wait for read_secret.
    return [
        Variable(name, _read(folder / name).strip(), str(folder / name), priority=0)
        for name in _listing(folder)
        if _picobot(name)
    ]


_LINE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*")
_DOUBLE_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def parse_env_file(path: Path) -> list[Variable]:
    """The ``NAME=value`` lines of a ``.env`` file, in file order.

    Understood: blank lines, ``#`` comments, an optional ``export``, values bare (a
    ``#`` after a space starts a comment), in single quotes (taken literally) or in
    double quotes (``\\n``, ``\\t``, ``\\"``, ``\\\\`` escapes). Anything else is a
    :class:`ConfigError` naming the line but never quoting it: it may hold a secret.
    """
    variables = []
    for number, line in enumerate(_read(path).splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        value = _unquote(match.group(2)) if match else None
        if match is None or value is None:
            raise ConfigError(
                f"{path} line {number}: not NAME=value (one per line; quotes must close on"
                f" the same line; set {ENV_FILE_ENV} to another file, or to nothing to read"
                " none)"
            )
        variables.append(Variable(match.group(1), value, f"{path} line {number}", priority=1))
    return variables


def _unquote(raw: str) -> str | None:
    """The value of ``raw``, or None if its quotes do not close at its end."""
    if raw[:1] == "'":
        closed = re.fullmatch(r"'([^']*)'(\s+#.*)?", raw)
        return closed.group(1) if closed else None
    if raw[:1] == '"':
        closed = re.fullmatch(r'"((?:[^"\\]|\\.)*)"(\s+#.*)?', raw)
        if closed is None:
            return None
        return re.sub(r"\\(.)", lambda m: _DOUBLE_ESCAPES.get(m.group(1), m.group(0)), closed[1])
    return re.split(r"\s+#", raw, maxsplit=1)[0]


def config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to read: explicit, else $PICOBOT_CONFIG, else ./config.toml if present.

    A file named explicitly or by the environment must exist; ./config.toml is optional.
    """
    named = explicit if explicit is not None else os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        _check_is_file(path)
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    if not default.exists():
        return None
    # Optional, but once there it must be readable: a directory is not "no file".
    _check_is_file(default)
    return default


def _check_is_file(path: Path) -> None:
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error or bytes that are not UTF-8 are a ConfigError.

    The message gives the location: line and column, or the position of the first byte
    that is not UTF-8 (counting from 1).
    """
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start + 1})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
