"""``picobot check-config``: the file, then the ``PICOBOT_*`` variables, then the secrets.

A configuration passes only when every source does: the file alone, the variables on
top of it, and the secrets that the enabled parts read at start-up (a channel's tokens,
the model's API key, the operator keys). Those are checked by building the same objects
``serve`` and ``tui`` build (a webhook platform, the WebSocket key ring, the provider),
so this command and start-up can never disagree on what is missing; nothing is started
and no value is printed. "ok" is printed only when nothing failed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from picobot.cli.common import EXIT_CONFIG, EXIT_OK
from picobot.config.settings import Settings, build_settings, validate_environment, validate_file
from picobot.errors import ConfigError, LLMError


def run_check_config(path: Path | None) -> int:
    """Check ``path`` (None: no file, defaults apply) and the environment; the exit status.

    Each problem goes to stderr, prefixed by where it lies (the file, ``environment``,
    or the config key of the part that needs a secret); the verdict goes to stdout.
    """
    if path is not None:
        problems = validate_file(path)
        if problems:
            for problem in problems:
                print(f"{path}: {problem}", file=sys.stderr)
            return EXIT_CONFIG
    problems = validate_environment(path)
    for problem in problems:
        print(f"environment: {problem}", file=sys.stderr)
    if problems:
        return EXIT_CONFIG
    problems = startup_problems(build_settings(path))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return EXIT_CONFIG
    print(f"{path}: ok" if path is not None else "no config file; defaults apply: ok")
    return EXIT_OK


def startup_problems(settings: Settings) -> list[str]:
    """What would stop ``serve`` (or the chat) at start-up, one line per enabled part."""
    checks: list[tuple[str, Callable[[], object]]] = [("llm", lambda: _provider(settings))]
    channels = settings.channels
    if channels.websocket.enabled:
        checks.append(("channels.websocket", lambda: _websocket_keys(settings)))
    if settings.server.enable_admin_api:
        checks.append(("server", lambda: _admin_keys(settings)))
    from picobot.channels.webhook.registry import PLATFORMS

    for name, factory in PLATFORMS.items():
        section = getattr(channels.webhook, name, None)
        if section is not None and section.enabled:
            checks.append((f"channels.webhook.{name}", _bind(factory, section)))
    problems: list[str] = []
    for where, check in checks:
        try:
            check()
        except (ConfigError, LLMError) as exc:
            problems.append(f"{where}: {exc}")
    return problems


def _bind(factory: Callable[[object], object], section: object) -> Callable[[], object]:
    return lambda: factory(section)


def _provider(settings: Settings) -> object:
    # Building a provider reads its key and finds its model; it loads and calls nothing.
    from picobot.llm.factory import build_provider

    return build_provider(settings.llm)


def _websocket_keys(settings: Settings) -> object:
    from picobot.channels.websocket.protocol import parse_api_keys
    from picobot.config.sources import read_secret

    env = settings.channels.websocket.api_keys_env
    if not parse_api_keys(read_secret(env), env):
        raise ConfigError(f"{env} holds no WebSocket API keys; every client would be refused")
    return None


def _admin_keys(settings: Settings) -> object:
    # No keys at all is allowed (the admin API stays off); malformed keys stop serve.
    from picobot.admin.api import load_admin_keys

    return load_admin_keys(settings.server)
