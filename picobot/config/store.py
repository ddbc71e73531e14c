"""The ``[store]`` section: which database holds the conversations.

Empty (the default): the SQLite file ``<data dir>/conversations.db``, embedded, nothing
to run. A ``postgresql://`` URL: a PostgreSQL database that several PicoBot instances
can share (docs/deploy.md). A password never goes in this file: libpq reads it from
``PGPASSWORD`` or ``~/.pgpass``, or the whole URL comes from the variable ``url_env``.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator

from picobot.config.sections import OptionalEnvName, Section
from picobot.config.sources import read_secret
from picobot.errors import ConfigError

SCHEMES = ("postgresql", "postgres")
"""URL schemes of a PostgreSQL database."""


def redacted(url: str) -> str:
    """``url`` without its password: what logs and messages show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    netloc = f"{parts.username}:***@{host}{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _scheme_ok(value: str) -> bool:
    return urlsplit(value).scheme in SCHEMES


def check_url(value: str) -> str:
    """``value`` if it is empty or a PostgreSQL URL without a password; never repeats it
    (it may hold one)."""
    if not value:
        return value
    if not _scheme_ok(value):
        raise ValueError("must be a postgresql:// URL (empty: the SQLite file in the data dir)")
    if urlsplit(value).password is not None:
        raise ValueError(
            "holds a password; put it in PGPASSWORD or ~/.pgpass, or the whole URL in the"
            " variable named by url_env (the value is not shown)"
        )
    return value


class StoreSettings(Section):
    """The database (see docs/deploy.md#postgresql)."""

    url: Annotated[str, AfterValidator(check_url)] = ""
    """A postgresql:// URL of the database (no password: PGPASSWORD or ~/.pgpass). Empty:
    the SQLite file <data dir>/conversations.db."""
    url_env: OptionalEnvName = ""
    """Name of an environment variable holding the URL (a password may be in it); when it
    is set, it is used instead of url."""

    def resolved_url(self) -> str:
        """The URL in force: the value of ``url_env`` when that is set, else ``url``; empty
        for the SQLite file. Raises ConfigError for a variable that holds none or holds no
        PostgreSQL URL (never showing its value)."""
        if not self.url_env:
            return self.url
        value = read_secret(self.url_env)
        if not value:
            raise ConfigError(f"[store] url_env names {self.url_env}, which holds no URL")
        if not _scheme_ok(value):
            raise ConfigError(
                f"[store] url_env: {self.url_env} holds no postgresql:// URL (not shown)"
            )
        return value
