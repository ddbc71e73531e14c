"""Settings loading (file, PICOBOT_CONFIG, env, errors) and the generated config/docs."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from picobot.config.reference import (
    EXAMPLE_FILE,
    MARKDOWN_FILE,
    collect,
    render_config,
    render_markdown,
)
from picobot.config.settings import (
    LOCAL_REPLY_TOKENS,
    LOCAL_TEMPERATURE,
    REMOTE_REPLY_TOKENS,
    REMOTE_TEMPERATURE,
    LLMSettings,
    Settings,
    load_settings,
    validate_file,
)
from picobot.errors import ConfigError

WriteConfig = Callable[..., Path]
REPO = Path(__file__).resolve().parents[2]


# --- loading ------------------------------------------------------------------------------


def test_defaults_apply_without_a_file() -> None:
    settings = load_settings()
    assert settings == Settings()
    assert settings.llm.provider == "local"
    assert settings.session.memory.context_budget_tokens == 4000
    assert settings.session.retention.max_age_days == 90
    assert settings.db_path == Path("data") / "conversations.db"


def test_values_from_dot_config_toml(write_config: WriteConfig) -> None:
    write_config(
        '[llm]\nprovider = "openai"\nbase_url = "http://127.0.0.1:11434/v1"\n'
        "[session.memory]\ncontext_budget_tokens = 6000\n"
        '[channels.tui]\nuser_name = "alice"\n'
    )
    settings = load_settings()
    assert settings.llm.provider == "openai"
    assert settings.llm.base_url == "http://127.0.0.1:11434/v1"
    assert settings.session.memory.context_budget_tokens == 6000
    assert settings.channels.tui.user_name == "alice"
    # Keys the file leaves out keep their defaults, even inside a section it sets.
    assert settings.session.memory.max_session_messages == 20
    assert settings.llm.temperature == -1
    assert settings.llm.sampling_temperature == 0.7  # the openai provider's default


def test_picobot_config_names_the_file(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config('[agent]\nname = "FromCwd"\n')
    other = write_config('[agent]\nname = "FromEnvPath"\n', name="etc/picobot.toml")
    monkeypatch.setenv("PICOBOT_CONFIG", str(other))
    assert load_settings().agent.name == "FromEnvPath"
    # An explicit path beats PICOBOT_CONFIG.
    assert load_settings("config.toml").agent.name == "FromCwd"


def test_env_overrides_beat_the_file(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(
        '[llm]\nbase_url = "http://file.example/v1"\nmodel = "file-model"\n'
        "[session.memory]\ncontext_budget_tokens = 5000\nmax_session_messages = 7\n"
    )
    monkeypatch.setenv("PICOBOT_LLM__BASE_URL", "http://env.example/v1")
    monkeypatch.setenv("PICOBOT_SESSION__MEMORY__CONTEXT_BUDGET_TOKENS", "6000")
    settings = load_settings()
    assert settings.llm.base_url == "http://env.example/v1"
    assert settings.session.memory.context_budget_tokens == 6000
    # The env var replaces one key, not the file's whole section.
    assert settings.llm.model == "file-model"
    assert settings.session.memory.max_session_messages == 7


def test_init_values_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_AGENT__NAME", "EnvName")
    assert load_settings().agent.name == "EnvName"
    assert load_settings(agent={"name": "InitName"}).agent.name == "InitName"


def test_unknown_key_is_named(write_config: WriteConfig) -> None:
    write_config("[llm]\ntemprature = 0.5\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "llm.temprature: unknown key" in info.value.problems
    assert "llm.temprature: unknown key" in str(info.value)
    assert "config.toml" in str(info.value)


def test_every_bad_key_is_named(write_config: WriteConfig) -> None:
    write_config(
        "[llm]\ntemprature = 0.5\ntemperature = 9\n"
        '[session.memory]\ncontext_budget_tokens = "lots"\n'
        "[bogus]\nx = 1\n"
    )
    with pytest.raises(ConfigError) as info:
        load_settings()
    keys = {p.split(":")[0] for p in info.value.problems}
    assert keys == {
        "llm.temprature",
        "llm.temperature",
        "session.memory.context_budget_tokens",
        "bogus",
    }


def test_wrong_type_names_the_key(write_config: WriteConfig) -> None:
    write_config('[session.memory]\ncontext_budget_tokens = "lots"\n')
    with pytest.raises(ConfigError) as info:
        load_settings()
    (problem,) = info.value.problems
    assert problem.startswith("session.memory.context_budget_tokens: ")
    assert "integer" in problem


SECRET = "sk-proj-REALSECRET1234567890abcdef"


def test_a_secret_pasted_into_an_env_key_is_refused_and_never_repeated(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(f'[llm]\napi_key_env = "{SECRET}"\n')
    monkeypatch.setenv("PICOBOT_CHANNELS__WEBSOCKET__API_KEYS_ENV", "k3y-for-the-web-app-9f2c1a7e")
    with pytest.raises(ConfigError) as info:
        load_settings()
    keys = sorted(p.split(":")[0] for p in info.value.problems)
    assert keys == [
        "PICOBOT_CHANNELS__WEBSOCKET__API_KEYS_ENV (channels.websocket.api_keys_env)",
        "llm.api_key_env",
    ]
    assert "name of an environment variable" in str(info.value)
    assert SECRET not in str(info.value) and "k3y-for" not in str(info.value)
    monkeypatch.delenv("PICOBOT_CHANNELS__WEBSOCKET__API_KEYS_ENV")
    (problem,) = validate_file(path)
    assert problem.startswith("llm.api_key_env: ") and SECRET not in problem


@pytest.mark.parametrize("path", ["chat", "/a b", "/ws?x=1", ""])
def test_a_websocket_path_must_be_a_url_path(write_config: WriteConfig, path: str) -> None:
    write_config(f'[channels.websocket]\npath = "{path}"\n')
    with pytest.raises(ConfigError) as info:
        load_settings()
    (problem,) = info.value.problems
    assert problem.startswith("channels.websocket.path: ") and "starting with /" in problem


URL_KEYS = [
    ("llm", "base_url"),
    ("channels.webhook.whatsapp", "graph_base_url"),
    ("channels.webhook.telegram", "api_base_url"),
    ("channels.webhook.slack", "api_base_url"),
]


@pytest.mark.parametrize(("table", "key"), URL_KEYS)
@pytest.mark.parametrize(
    "url", ["api.telegram.org", "localhost:8080/v1", "ftp://host/x", "https://", "http://h:x/", ""]
)
def test_a_base_url_must_be_an_absolute_http_url(
    write_config: WriteConfig, table: str, key: str, url: str
) -> None:
    # Found at start-up (and by check-config), not when the first reply or model call fails.
    write_config(f'[{table}]\n{key} = "{url}"\n')
    with pytest.raises(ConfigError) as info:
        load_settings()
    (problem,) = info.value.problems
    assert problem.startswith(f"{table}.{key}: ") and "http:// or https://" in problem
    assert ("is not set" in problem) == (url == "")


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/v1", "https://api.example.com/"])
def test_a_base_url_that_is_a_url_loads(write_config: WriteConfig, url: str) -> None:
    write_config(f'[llm]\nbase_url = "{url}"\n[channels.webhook.slack]\napi_base_url = "{url}"\n')
    settings = load_settings()
    assert settings.llm.base_url == url == settings.channels.webhook.slack.api_base_url


def test_the_local_model_must_hold_a_full_prompt_and_a_reply(write_config: WriteConfig) -> None:
    # 4000 + 256 (the local default reply) > 4096: every turn with a full prompt would
    # fail inside llama.cpp (a GGUF of one's own: no profile caps its prompt).
    own = '[llm]\nmodel_path = "own.gguf"\n'
    write_config(own + "context_tokens = 4096\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    (problem,) = info.value.problems
    assert problem.startswith("settings: ") and "at least 4256" in problem
    write_config(own + "context_tokens = 4096\nmax_tokens = 512\n")
    with pytest.raises(ConfigError, match="at least 4512"):
        load_settings()
    # The bundled model's profile holds its prompt to 1024 tokens: 1024 + 256 fit.
    write_config("[llm]\ncontext_tokens = 4096\n")
    assert load_settings().prompt_memory.context_budget_tokens == 1024
    write_config("[llm]\ncontext_tokens = 4096\nprompt_budget_tokens = 4000\n")
    with pytest.raises(ConfigError, match="at least 4256"):
        load_settings()
    # A remote model's window is its server's business; a bigger one fits.
    write_config('[llm]\nprovider = "openai"\ncontext_tokens = 4096\n')
    assert load_settings().llm.context_tokens == 4096
    write_config(own + "context_tokens = 4512\n")
    assert load_settings().llm.context_tokens == 4512


def test_only_the_bundled_model_caps_later_recall_and_an_epoch_start(
    write_config: WriteConfig,
) -> None:
    write_config("")
    bundled = load_settings().prompt_memory
    assert (bundled.later_recall_tokens, bundled.epoch_keep_messages) == (48, 4)
    write_config("[session.memory]\nlater_recall_tokens = 100\nepoch_keep_messages = 8\n")
    chosen = load_settings().prompt_memory
    assert (chosen.later_recall_tokens, chosen.epoch_keep_messages) == (100, 8)
    for llm in ('provider = "openai"', 'model_path = "own.gguf"\ncontext_tokens = 8192'):
        write_config(f"[llm]\n{llm}\n")
        other = load_settings().prompt_memory
        assert (other.later_recall_tokens, other.epoch_keep_messages) == (0, 0)


def test_bad_env_value_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_LLM__MAX_TOKENS", "many")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert [p.split(":")[0] for p in info.value.problems] == [
        "PICOBOT_LLM__MAX_TOKENS (llm.max_tokens)"
    ]


def test_malformed_list_env_value_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_PERMISSIONS__GLOBAL_MEMORY_READ", "tui:a")
    with pytest.raises(ConfigError, match="PICOBOT_PERMISSIONS__GLOBAL_MEMORY_READ"):
        load_settings()


def test_invalid_toml_is_a_loud_error(write_config: WriteConfig) -> None:
    write_config('[llm]\nmodel = "unterminated\n')
    with pytest.raises(ConfigError, match=r"config\.toml: invalid TOML: .*line 2"):
        load_settings()


def test_picobot_config_naming_a_missing_file_is_an_error(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config('[agent]\nname = "WouldBeAFallback"\n')
    monkeypatch.setenv("PICOBOT_CONFIG", "nowhere/picobot.toml")
    with pytest.raises(ConfigError, match=r"nowhere.picobot\.toml does not exist"):
        load_settings()


def test_explicit_missing_file_is_an_error() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings("missing.toml")


def test_validate_file_ignores_the_environment(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write_config("[llm]\nmax_tokens = 100\n")
    monkeypatch.setenv("PICOBOT_LLM__MAX_TOKENS", "many")
    assert validate_file(good) == []
    bad = write_config("[llm]\nmax_tokens = -1\n", name="bad.toml")
    assert [p.split(":")[0] for p in validate_file(bad)] == ["llm.max_tokens"]
    # Also for keys the file does not set: their variables are not the file's fault.
    other = write_config("[agent]\nname = 'x'\n", name="other.toml")
    monkeypatch.setenv("PICOBOT_LLM__TEMPERATURE", "9")
    monkeypatch.setenv("PICOBOT_PERMISSIONS__GLOBAL_MEMORY_READ", "not json")
    assert validate_file(other) == []


# --- the generated config file -----------------------------------------------------------


def test_rendered_config_round_trips_to_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PICOBOT_DATA__DIR")
    monkeypatch.delenv("PICOBOT_EMBEDDINGS__PROVIDER")
    data = tomllib.loads(render_config())
    # Every key is present with its default value, not merely "validates to defaults".
    assert data == Settings().model_dump(mode="json")
    assert Settings.model_validate(data) == Settings()


def test_rendered_config_documents_every_key() -> None:
    text = render_config()
    lines = text.splitlines()
    keys = [k for table in collect() for k in table.keys]
    assert len(keys) > 30
    assignment = 0
    for key in keys:
        # Keys appear in model order; search onwards since names repeat across tables.
        assignment = next(
            i for i in range(assignment + 1, len(lines)) if lines[i].startswith(f"{key.name} = ")
        )
        # The env line sits right above the key; the description comment above that.
        assert lines[assignment - 1] == f"# env: {key.env}"
        assert lines[assignment - 2].startswith("# ")
    assert (
        "# env: PICOBOT_SESSION__MEMORY__CONTEXT_BUDGET_TOKENS\ncontext_budget_tokens = 4000"
        in (text)
    )
    assert "# Token budget of the prompt context" in text
    assert '# One of: "local", "openai", "anthropic", "scripted".' in text
    assert '# One of: "DEBUG", "INFO", "WARNING", "ERROR".' in text
    assert "# Allowed: >= -1.0, <= 2.0." in text


def test_rendered_config_tables_in_order() -> None:
    headers = re.findall(r"^\[([a-z_.]+)\]$", render_config(), re.M)
    # One header per section that holds keys, in model order, nested ones dotted.
    assert headers == [t.name for t in collect() if t.path and t.keys]
    fixed = [
        "agent",
        "llm",
        "data",
        "session.retention",
        "session.memory",
        "privacy",
        "channels.tui",
        "channels.websocket",
        "server",
        "logging",
    ]
    # The sections the design fixes are all there, in this order (others may sit between).
    assert [h for h in headers if h in fixed] == fixed


def test_rendered_config_header_and_no_secrets() -> None:
    text = render_config()
    header = text.split("\n\n# ---")[0]
    for needle in ("PICOBOT_CONFIG", "PICOBOT_LLM__BASE_URL", "Secrets never go in this file"):
        assert needle in header
    data = tomllib.loads(text)
    # Every *_env key names an environment variable (or is empty: [llm]'s applies), never
    # a secret value.
    env_refs = [v for section in data.values() for v in _leaves(section, "_env")]
    assert env_refs
    assert all(re.fullmatch(r"([A-Z][A-Z0-9_]*)?", v) for v in env_refs)


def _leaves(node: object, suffix: str) -> list[str]:
    if not isinstance(node, dict):
        return []
    found: list[str] = []
    for key, value in node.items():
        if isinstance(value, dict):
            found += _leaves(value, suffix)
        elif key.endswith(suffix):
            found.append(value)
    return found


def test_edited_rendered_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "edited.toml"
    text = render_config().replace("context_budget_tokens = 4000", "context_budget_tokens = 6000")
    path.write_text(text, encoding="utf-8")
    assert load_settings(path).session.memory.context_budget_tokens == 6000


# --- the generated reference -------------------------------------------------------------


def test_markdown_reference_has_a_row_per_key() -> None:
    text = render_markdown()
    for needle in ("PICOBOT_CONFIG", "check-config", "precedence", "### `[session.memory]`"):
        assert needle in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == sum(len(t.keys) for t in collect())
    assert (
        "| `context_budget_tokens` | int (>= 256, <= 1048576) | `4000` | "
        "`PICOBOT_SESSION__MEMORY__CONTEXT_BUDGET_TOKENS` |" in text
    )
    # Every row has exactly five cells even when a value contains a pipe.
    assert all(len(re.split(r"(?<!\\)\|", row)) == 7 for row in rows)


@pytest.mark.parametrize(
    ("relative", "render"),
    [(EXAMPLE_FILE, render_config), (MARKDOWN_FILE, render_markdown)],
)
def test_committed_file_matches_the_generator(relative: str, render: Callable[[], str]) -> None:
    committed = (REPO / relative).read_text(encoding="utf-8")
    assert committed == render(), (
        f"{relative} is out of date; regenerate with `python -m picobot.config.reference`"
    )


def test_max_tokens_zero_means_the_providers_default(write_config: WriteConfig) -> None:
    assert LLMSettings().max_tokens == 0
    assert LLMSettings().reply_tokens == LOCAL_REPLY_TOKENS == 256
    assert LLMSettings(provider="openai").reply_tokens == REMOTE_REPLY_TOKENS == 1024
    assert LLMSettings(provider="anthropic").reply_tokens == 1024
    # A value set by hand is kept, for every provider (configs written before 0 meant
    # "the provider's default" keep their meaning).
    write_config('[llm]\nprovider = "openai"\nmax_tokens = 512\n')
    assert load_settings().llm.reply_tokens == 512
    assert LLMSettings(max_tokens=300).reply_tokens == 300


def test_an_unset_temperature_is_the_providers_default(write_config: WriteConfig) -> None:
    assert LLMSettings().sampling_temperature == LOCAL_TEMPERATURE == 0.3
    assert LLMSettings(provider="openai").sampling_temperature == REMOTE_TEMPERATURE == 0.7
    write_config("[llm]\ntemperature = 0.9\n")
    assert load_settings().llm.sampling_temperature == 0.9
    write_config("[llm]\ntemperature = 0\n")  # greedy: zero is a value, not the default
    assert load_settings().llm.sampling_temperature == 0.0
    write_config("[llm]\ntemperature = -0.5\n")
    with pytest.raises(ConfigError, match=r"llm\.temperature: .*must be -1"):
        load_settings()


@pytest.mark.parametrize(
    ("key", "value"),
    [("repeat_penalty", "0.9"), ("top_p", "0"), ("top_k", "-1"), ("min_p", "1.5"), ("seed", "-2")],
)
def test_sampling_settings_are_bounded(write_config: WriteConfig, key: str, value: str) -> None:
    write_config(f"[llm]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert [p.split(":")[0] for p in info.value.problems] == [f"llm.{key}"]
