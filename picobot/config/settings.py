"""Settings: one pydantic-settings root with documented nested sections.

Sources, highest priority first: explicit init values; ``PICOBOT_<SECTION>__<KEY>``
variables from the process environment, then the ``.env`` file, then the secrets
directory (see :mod:`.sources`); the TOML file (``PICOBOT_CONFIG`` or ``./config.toml``);
the defaults below. :func:`build_settings` is the one validation behind ``load`` and
``check-config``: a broken input is a loud :class:`ConfigError` naming every bad key
and the variable that set it; there is no silent fallback. Secrets never sit in the
file: keys ending in ``_env`` name the variable that holds the secret.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from picobot.config.channels import ChannelsSettings, ServerSettings
from picobot.config.embeddings import EmbeddingSettings
from picobot.config.environment import EnvInput, deep_merge, env_input
from picobot.config.keys import KeySettings
from picobot.config.learning import MemoryRootSettings
from picobot.config.location import DataLocation, locate_data_dir
from picobot.config.model import BUNDLED_EPOCH_KEEP_MESSAGES, BUNDLED_LATER_RECALL_TOKENS
from picobot.config.model import DAY_SECS as DAY_SECS
from picobot.config.model import DEFAULT_SYSTEM_PROMPT as DEFAULT_SYSTEM_PROMPT
from picobot.config.model import LOCAL_REPLY_TOKENS as LOCAL_REPLY_TOKENS
from picobot.config.model import LOCAL_SYSTEM_PROMPT as LOCAL_SYSTEM_PROMPT
from picobot.config.model import LOCAL_TEMPERATURE as LOCAL_TEMPERATURE
from picobot.config.model import MAX_TOKENS_WINDOW as MAX_TOKENS_WINDOW
from picobot.config.model import REMOTE_REPLY_TOKENS as REMOTE_REPLY_TOKENS
from picobot.config.model import REMOTE_TEMPERATURE as REMOTE_TEMPERATURE
from picobot.config.model import AgentSettings as AgentSettings
from picobot.config.model import LLMSettings as LLMSettings
from picobot.config.sections import RegexPattern, Section
from picobot.config.sources import CONFIG_ENV as CONFIG_ENV
from picobot.config.sources import DEFAULT_CONFIG_FILE as DEFAULT_CONFIG_FILE
from picobot.config.sources import config_path as config_path
from picobot.config.sources import gather, read_toml
from picobot.config.store import StoreSettings, redacted
from picobot.errors import ConfigError

_INPUT: ContextVar[dict[str, Any] | None] = ContextVar("picobot_config_input", default=None)
YEAR_SECS = 365 * DAY_SECS
MAX_ROWS = 10_000
"""Bound of per-prompt row counts, which become SQL LIMITs (past 2**63 they crash)."""
MAX_CAP = 1_000_000
"""Bound of the storage caps (SQL LIMITs too); a larger cap is no cap at all in practice."""


class DataSettings(Section):
    """Where PicoBot keeps its data."""

    dir: str = ""
    """Data directory; the database is <dir>/conversations.db. Empty: ./data if the working
    directory holds a config.toml or a data/ directory, else the user data directory
    (~/.local/share/picobot on Linux); `picobot status` shows which. A relative path is
    relative to the working directory PicoBot starts in, not to this file."""
    busy_timeout_ms: int = Field(default=5000, ge=0, le=3_600_000)
    """How long a write waits for a database lock held by another process (at most an hour)."""
    reader_threads: int = Field(default=2, ge=1, le=8)
    """Database reader connections of the server, each with its own thread. The first serves
    every read while it keeps up; the others take reads only while the ones before them are
    slow (an export, a big count: more than 20 ms a read), so such a read does not hold up
    every chat's reads, and readers do not contend for Python's GIL the rest of the time."""


class RetentionSettings(Section):
    """How long conversation data is kept, and how much of it per user and per session."""

    max_age_days: int = Field(default=90, ge=1, le=36_500)
    """Conversation data older than this many days is deleted. At most 36,500 (100 years):
    the cutoff date must stay a real date."""
    cleanup_interval_secs: int = Field(default=3600, ge=1, le=YEAR_SECS)
    """How often the retention task runs, in seconds (at most a year)."""
    erase_interval_secs: int = Field(default=86_400, ge=0, le=YEAR_SECS)
    """Least time between two erasures of what retention deleted (0: after every run; at most
    a year, so the next erasure is a date `picobot status` can show)."""
    max_sessions_per_user: int = Field(default=0, ge=0, le=MAX_CAP)
    """Most sessions a user keeps (0: no cap). Past it, their least recently active sessions
    are deleted whole, with all that was derived from them, and they are told; never a
    session in use in a chat, nor one holding a pinned message (see privacy.md)."""
    max_messages_per_session: int = Field(default=0, ge=0, le=MAX_CAP)
    """Most messages a session keeps (0: no cap, else at least 2). Past it, its oldest
    exchanges are deleted, down to 90% of the cap, and the user is told; never the current
    exchange nor a pinned message (see privacy.md)."""

    @field_validator("max_messages_per_session")
    @classmethod
    def _one_exchange(cls, value: int) -> int:
        if value == 1:
            raise ValueError("must be 0 (no cap) or at least 2, so a session holds one exchange")
        return value


class MemorySettings(Section):
    """What goes into each prompt and how history is folded."""

    enable_user_memories: bool = True
    """Let users save memories (/remember, memory tool) that shape later prompts."""
    context_budget_tokens: int = Field(default=4000, ge=256, le=MAX_TOKENS_WINDOW)
    """Token budget of the prompt context (memories, summary, recall, history). The model's
    profile may lower it: [llm] prompt_budget_tokens, 1024 for the bundled SmolLM2-135M."""
    max_session_messages: int = Field(default=20, ge=1, le=MAX_ROWS)
    """Most recent messages of the session included in the prompt."""
    window_drop_messages: int = Field(default=10, ge=0, le=MAX_ROWS)
    """Messages the window drops at once when it is full (at most half of it; 0: it slides
    by one message a turn). Dropping in blocks keeps consecutive prompts sharing a long
    prefix, which model servers cache."""
    max_user_memories: int = Field(default=50, ge=0, le=MAX_ROWS)
    """Most memories a user may keep, and include in a prompt."""
    include_summary_on_truncation: bool = True
    """Include the session summary when older history was cut from the prompt."""
    enable_summarization: bool = True
    """Fold long histories into a stored summary in the background."""
    summarization_trigger_tokens: int = Field(default=8000, ge=100, le=MAX_TOKENS_WINDOW)
    """Unsummarized history size that triggers summarization."""
    summarization_keep_recent: int = Field(default=10, ge=0, le=MAX_ROWS)
    """Messages left out of the summary (the most recent ones)."""
    recall_budget_tokens: int = Field(default=800, ge=0, le=MAX_TOKENS_WINDOW)
    """The least that records recalled by keyword search get of each prompt: all of it
    for the first message of a prompt epoch, half of it for later ones (recall fills
    whatever more the rest of the prompt leaves; see memory.md).
    The model's profile may lower it: [llm] recall_budget_tokens, 256 for the bundled model."""
    later_recall_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS_WINDOW)
    """Most tokens of records recalled for a message after the first of a prompt epoch (an
    epoch's first message keeps recall_budget_tokens). Each turn re-sends its recall, so a
    slow model evaluates it every turn. 0 = the model's profile: 48 for the bundled
    SmolLM2-135M, no cap for the others."""
    epoch_keep_messages: int = Field(default=0, ge=0, le=MAX_ROWS)
    """Most history messages a new prompt epoch starts with (at most max_session_messages -
    window_drop_messages). The model evaluates them again when an epoch starts. 0 = the
    model's profile: 4 for the bundled SmolLM2-135M, no cap for the others."""
    enable_recall: bool = True
    """Recall records from the user's other sessions by keywords of each message."""
    recall_max_terms: int = Field(default=8, ge=1, le=32)
    """Most keywords (OR terms) taken from a message for recall."""
    max_memory_chars: int = Field(default=2000, ge=16, le=1_000_000)
    """Longest content of one user memory, in characters."""
    summarization_check_interval_secs: int = Field(default=300, ge=1, le=DAY_SECS)
    """How often the background task looks for sessions that need summarizing (at most daily)."""


class SessionSettings(Section):
    """Sessions: retention and memory."""

    retention: RetentionSettings = RetentionSettings()
    """Retention of conversation data."""
    memory: MemorySettings = MemorySettings()
    """Prompt context and summarization."""


class PrivacySettings(Section):
    """Privacy controls."""

    redact_secrets: bool = True
    """Replace secrets (API keys, tokens, passwords) with markers before storing text."""
    confirmation_timeout_secs: int = Field(default=60, ge=5, le=DAY_SECS)
    """Seconds a purge confirmation stays valid (at most a day)."""
    extra_redaction_patterns: list[RegexPattern] = Field(default_factory=list)
    """Extra regular expressions whose matches are redacted as [REDACTED:custom]. Each must
    be a valid Python regular expression that does not match empty text (checked at load)."""
    retention_batch_size: int = Field(default=500, ge=1, le=100_000)
    """Rows deleted per transaction by retention and purges, so chat turns never wait long."""


class PermissionsSettings(Section):
    """Operator grants beyond each user's own data (deny by default)."""

    global_memory_read: list[str] = Field(default_factory=list)
    """User ids granted MemoryRead{Global}: they may read shared (global) memories."""
    global_memory_write: list[str] = Field(default_factory=list)
    """User ids granted MemoryWrite{Global}: they may change shared (global) memories."""


class LoggingSettings(Section):
    """Logging."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level. DEBUG adds PicoBot's own detail; websockets stays at INFO, as its DEBUG
    records quote message text (the store logs no SQL)."""
    file: str = ""
    """Log file; empty = stderr, or <data.dir>/picobot.log while the TUI owns the terminal."""


class Settings(BaseSettings):
    """The root of PicoBot's configuration."""

    # No env_prefix: PICOBOT_* variables are mapped by .environment, which names the
    # variable behind each problem.
    model_config = SettingsConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    agent: AgentSettings = AgentSettings()
    """The bot's identity."""
    llm: LLMSettings = LLMSettings()
    """Language model."""
    data: DataSettings = DataSettings()
    """Data directory and database."""
    store: StoreSettings = StoreSettings()
    """The database: the SQLite file in the data directory, or PostgreSQL."""
    session: SessionSettings = SessionSettings()
    """Sessions, memory and retention."""
    memory: MemoryRootSettings = MemoryRootSettings()
    """Learned memory (facts the bot learns by itself)."""
    embeddings: EmbeddingSettings = EmbeddingSettings()
    """Recall by meaning: the embedding model."""
    privacy: PrivacySettings = PrivacySettings()
    """Privacy controls."""
    keys: KeySettings = KeySettings()
    """Per-user data keys: the master key and key-store backups."""
    channels: ChannelsSettings = ChannelsSettings()
    """Chat channels."""
    permissions: PermissionsSettings = PermissionsSettings()
    """Explicit operator grants."""
    server: ServerSettings = ServerSettings()
    """HTTP server."""
    logging: LoggingSettings = LoggingSettings()
    """Logging."""

    _data_location: DataLocation | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _prompt_fits_the_local_model(self) -> Settings:
        # The local model's window is known: a prompt of the full budget plus a reply of
        # max_tokens must fit in it, else every long enough turn fails in llama.cpp.
        budget = self.prompt_memory.context_budget_tokens
        need = budget + self.llm.reply_tokens
        if self.llm.provider == "local" and need > self.llm.context_tokens:
            raise ValueError(
                f"llm.context_tokens ({self.llm.context_tokens}) must hold a full prompt"
                f" (session.memory.context_budget_tokens, as [llm] prompt_budget_tokens"
                f" allows: {budget}) plus a reply (llm.max_tokens,"
                f" {self.llm.reply_tokens}): raise context_tokens to at least {need} or lower"
                " the others"
            )
        return self

    @model_validator(mode="after")
    def _locate_data(self) -> Settings:
        # Decided once: a ./data created later in the run must not move the database.
        self._data_location = locate_data_dir(self.data.dir)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Init values beat what :func:`build_settings` prepared (file and variables).

        ``Settings(...)`` outside :func:`build_settings` reads the variables but no file.
        """
        return (init_settings, _Prepared(settings_cls))

    @property
    def prompt_memory(self) -> MemorySettings:
        """``[session.memory]`` with the model's profile applied: the prompt budget and
        recall floor in force, each the smaller of its key here and the model's cap
        (``[llm] prompt_budget_tokens`` / ``recall_budget_tokens``; small for the bundled
        model), and for the bundled model its caps on later messages' recall and on the
        messages a new epoch keeps, where those keys are 0. What the prompt is built with."""
        memory = self.session.memory
        update: dict[str, int] = {}
        cap = self.llm.prompt_cap
        if cap is not None and cap < memory.context_budget_tokens:
            update["context_budget_tokens"] = max(256, cap)
        recall = self.llm.recall_cap
        if recall is not None and recall < memory.recall_budget_tokens:
            update["recall_budget_tokens"] = recall
        if self.llm.bundled and not memory.later_recall_tokens:
            update["later_recall_tokens"] = BUNDLED_LATER_RECALL_TOKENS
        if self.llm.bundled and not memory.epoch_keep_messages:
            update["epoch_keep_messages"] = BUNDLED_EPOCH_KEEP_MESSAGES
        return memory.model_copy(update=update) if update else memory

    @property
    def system_prompt(self) -> str:
        """The system prompt: ``[agent] system_prompt``, or the provider's default if empty."""
        if self.agent.system_prompt:
            return self.agent.system_prompt
        return LOCAL_SYSTEM_PROMPT if self.llm.provider == "local" else DEFAULT_SYSTEM_PROMPT

    @property
    def data_location(self) -> DataLocation:
        """The data directory and why it is the one (``[data] dir`` or the default rule)."""
        if self._data_location is None:  # built with model_construct: no validators ran
            return locate_data_dir(self.data.dir)
        return self._data_location

    @property
    def data_dir(self) -> Path:
        """The data directory as a path."""
        return self.data_location.path

    @property
    def db_path(self) -> Path:
        """The SQLite database file."""
        return self.data_dir / "conversations.db"

    @property
    def has_store(self) -> bool:
        """Whether there may be stored data to read: the SQLite file exists, or the
        store is a PostgreSQL database (commands then ask it)."""
        return bool(self.store.resolved_url()) or self.db_path.is_file()

    @property
    def database_label(self) -> str:
        """The database as commands name it: the SQLite file, or the PostgreSQL URL of
        ``[store]`` without its password."""
        url = self.store.resolved_url()
        return redacted(url) if url else str(self.db_path)


def describe_errors(exc: ValidationError, env: EnvInput | None = None) -> list[str]:
    """One line per bad key: dotted location and reason.

    When ``env`` set the key, the line starts with the variable (and the file it is in,
    if any): ``PICOBOT_LLM__TEMPERATURE (llm.temperature): ...``.
    """
    lines = []
    for err in exc.errors():
        parts = [str(part) for part in err["loc"]]
        loc = ".".join(parts) or "settings"
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        variable = env.variable_of(parts) if env is not None else None
        lines.append(f"{variable.label} ({loc}): {reason}" if variable else f"{loc}: {reason}")
    return lines


def build_settings(
    path: Path | None,
    *,
    environment: bool = True,
    secret_names: Iterable[str] = (),
    **overrides: Any,
) -> Settings:
    """The one validation: settings from ``path`` (or none), the variables and ``overrides``.

    Without ``environment`` the variables are left out, to check a file by itself.
    ``secret_names`` are further ``PICOBOT_*`` names that hold secrets rather than
    settings (``tui --key-env``). Raises :class:`ConfigError` listing every problem: each
    bad key, each variable that is no setting, each value that cannot be parsed.
    """
    data: dict[str, Any] = read_toml(path) if path else {}
    where = "PICOBOT_* environment" if environment else "no environment"
    where = f"{path} and {where}" if path else where
    env = EnvInput()
    if environment:
        env = env_input(Settings, gather(), configured=[data, overrides], secret_names=secret_names)
    problems = list(env.problems)
    token = _INPUT.set(deep_merge(data, env.data))
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = describe_errors(exc, env) + problems
    finally:
        _INPUT.reset(token)
    if problems:
        raise ConfigError(f"invalid configuration ({where})", problems)
    return settings


def _problems(path: Path | None, *, environment: bool) -> list[str]:
    try:
        build_settings(path, environment=environment)
    except ConfigError as exc:
        if not exc.problems:  # no file or source to check (unreadable, invalid TOML)
            raise
        return exc.problems
    return []


def validate_file(path: Path) -> list[str]:
    """Check a config file alone (no environment); return the problems, empty if fine."""
    return _problems(path, environment=False)


def validate_environment(path: Path | None) -> list[str]:
    """Check the ``PICOBOT_*`` variables on top of a valid file (or none); return the problems.

    Each problem names the variable that set the bad key, where one did.
    """
    return _problems(path, environment=True)


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    secret_names: Iterable[str] = (),
    **overrides: Any,
) -> Settings:
    """Load settings from the config file (if any), the variables and ``overrides``.

    The file is ``path``, else ``$PICOBOT_CONFIG``, else ``./config.toml`` if present.
    """
    return build_settings(config_path(path), secret_names=secret_names, **overrides)


class _Prepared(PydanticBaseSettingsSource):
    """The file and the variables merged by :func:`build_settings`, else the variables."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        """Unused: values are handed over whole by __call__."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        prepared = _INPUT.get()
        if prepared is not None:
            return dict(prepared)
        env = env_input(Settings, gather())
        if env.problems:
            raise ConfigError("invalid configuration (PICOBOT_* environment)", env.problems)
        return env.data
