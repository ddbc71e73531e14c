"""The base class of every config section, and the types of ``*_env``, URL and regex keys."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.fields import FieldInfo

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_name(value: str) -> str:
    # Never repeat the value: a secret pasted here by mistake must not reach a log.
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(
            "must be the name of an environment variable (letters, digits and _, not"
            " starting with a digit), not the secret itself; the value is not shown"
        )
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
"""A ``*_env`` key: the name of the environment variable that holds a secret."""


def _env_name_or_empty(value: str) -> str:
    return value and _env_name(value)


OptionalEnvName = Annotated[str, AfterValidator(_env_name_or_empty)]
"""An :data:`EnvName` that may be empty (another section's value then applies)."""


def is_env_name(info: FieldInfo) -> bool:
    """Whether the field is an :data:`EnvName` (its value names a secret's variable)."""
    checks = (_env_name, _env_name_or_empty)
    return any(getattr(meta, "func", None) in checks for meta in info.metadata)


def regex_problem(source: str) -> str | None:
    """Why ``source`` cannot serve as a redaction pattern, or None if it can.

    It must compile and must not match empty text (which would "redact" between every
    two characters). Checked at load, so ``check-config`` refuses what ``serve`` would.
    """
    try:
        compiled = re.compile(source)
    except re.error as exc:
        return f"invalid regular expression {source!r}: {exc}"
    if compiled.fullmatch("") is not None:
        return f"pattern {source!r} matches empty text"
    return None


def _regex(value: str) -> str:
    problem = regex_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


RegexPattern = Annotated[str, AfterValidator(_regex)]
"""A regular expression that compiles and matches no empty text."""


_URL_BREAKERS = re.compile(r"[\x00-\x20\x7f]")


def http_url_problem(value: str) -> str | None:
    """Why ``value`` is not an absolute http(s) URL with a host, or None if it is one.

    For URLs that PicoBot sends requests to: one that can never be reached would
    otherwise be found out only when the first request failed. Never names the value,
    which may carry a token.
    """
    if not value.strip():
        return "is not set"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return "is not a usable URL"
    if parts.scheme not in ("http", "https") or not parts.hostname or _URL_BREAKERS.search(value):
        return "is not a usable URL"
    return None


def _http_url(value: str) -> str:
    problem = http_url_problem(value)
    if problem is not None:
        raise ValueError(f"{problem}: must be an absolute http:// or https:// URL")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
"""A base URL that PicoBot sends requests to (an LLM server, a platform's API)."""


def _http_url_or_empty(value: str) -> str:
    return value and _http_url(value)


OptionalHttpUrl = Annotated[str, AfterValidator(_http_url_or_empty)]
"""An :data:`HttpUrl` that may be empty (another section's value then applies)."""


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, docstrings document.

    ``inf`` and ``nan`` (valid TOML floats) are refused: no timeout or interval works
    with them.
    """

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
        allow_inf_nan=False,
    )


def host_port(host: str, port: int) -> str:
    """``host:port`` as it is written in a URL: an IPv6 address in brackets (``[::1]:80``).

    A host name never contains ``:``, so one that does is an IPv6 address.
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
