"""Generate the commented config file and the configuration reference from the model.

The settings model in :mod:`picobot.config.settings` is the single source of truth: field
docstrings become comments, defaults become values, and the nesting becomes TOML
tables. ``picobot init`` writes :func:`render_config`; the committed
``config.toml.example`` and ``docs/configuration.md`` are these generators' output, and
a test fails when they drift. Regenerate both with ``python -m picobot.config.reference``.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import tomli_w
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from picobot.config.settings import CONFIG_ENV, Settings
from picobot.config.sources import (
    DEFAULT_ENV_FILE,
    DEFAULT_SECRETS_DIR,
    ENV_FILE_ENV,
    SECRETS_DIR_ENV,
)

ENV_PREFIX = "PICOBOT_"
ENV_DELIMITER = "__"
EXAMPLE_FILE = "config.toml.example"
MARKDOWN_FILE = "docs/configuration.md"
_WIDTH = 88


@dataclass(frozen=True, slots=True)
class Key:
    """One leaf setting: its name, documentation and default (JSON-compatible)."""

    name: str
    type_name: str
    default: Any
    env: str
    description: str
    choices: tuple[Any, ...] = ()
    constraints: tuple[str, ...] = ()

    @property
    def env_is_json(self) -> bool:
        """Lists and tables are given to the environment variable as JSON."""
        return isinstance(self.default, list | dict)


@dataclass(slots=True)
class Table:
    """One section of the settings, addressed by its dotted path."""

    path: tuple[str, ...]
    doc: str
    keys: list[Key] = field(default_factory=list)
    children: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The dotted TOML table name, e.g. ``session.memory``."""
        return ".".join(self.path)


def env_name(path: tuple[str, ...]) -> str:
    """The environment variable overriding the setting at ``path``."""
    return ENV_PREFIX + ENV_DELIMITER.join(part.upper() for part in path)


def collect(settings_cls: type[BaseModel] = Settings) -> list[Table]:
    """Walk the settings model depth-first; the root table (path ``()``) comes first."""
    tables: list[Table] = []
    _walk(settings_cls.model_construct(), (), _doc(settings_cls), tables)
    return tables


def _walk(model: BaseModel, path: tuple[str, ...], doc: str, out: list[Table]) -> None:
    table = Table(path, doc)
    out.append(table)
    dumped = model.model_dump(mode="json")
    nested: list[tuple[str, BaseModel, str]] = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            nested.append((name, value, _doc(type(value)) or info.description or ""))
            table.children.append(".".join((*path, name)))
            continue
        table.keys.append(_key(name, info, dumped[name], (*path, name)))
    for name, value, child_doc in nested:
        _walk(value, (*path, name), child_doc, out)


def _doc(cls: type[BaseModel]) -> str:
    """First paragraph of a class docstring, on one line."""
    text = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(text.split())


def _key(name: str, info: FieldInfo, default: Any, path: tuple[str, ...]) -> Key:
    annotation = info.annotation
    choices: tuple[Any, ...] = ()
    if get_origin(annotation) is Literal:
        choices = get_args(annotation)
        type_name = type(choices[0]).__name__ if choices else "literal"
    else:
        type_name = _type_name(annotation)
    return Key(
        name=name,
        type_name=type_name,
        default=default,
        env=env_name(path),
        description=" ".join((info.description or "").split()),
        choices=choices,
        constraints=_constraints(info),
    )


def _type_name(annotation: Any) -> str:
    """``list[str]`` for ``list[Annotated[str, ...]]``: validators are not part of the type."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if isinstance(origin, type) and args:
        return f"{origin.__name__}[{', '.join(_type_name(arg) for arg in args)}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _constraints(info: FieldInfo) -> tuple[str, ...]:
    """Human-readable bounds and patterns from the field's validation metadata."""
    found: list[str] = []
    for meta in info.metadata:
        for attr, symbol in _BOUNDS:
            bound = getattr(meta, attr, None)
            if bound is not None:
                found.append(f"{symbol} {bound}")
        for attr, label in (("min_length", "min length"), ("max_length", "max length")):
            length = getattr(meta, attr, None)
            if length is not None:
                found.append(f"{label} {length}")
        pattern = getattr(meta, "pattern", None)
        if pattern is not None:
            found.append(f"pattern {pattern}")
    return tuple(found)


def toml_value(value: Any) -> str:
    """A value as TOML text (``None`` has no TOML form and renders as ``(unset)``)."""
    if value is None:
        return "(unset)"
    return tomli_w.dumps({"v": value}).rstrip("\n").removeprefix("v = ")


def _json_example(key: Key) -> str:
    sample = '["a", "b"]' if isinstance(key.default, list) else '{"a": 1}'
    return f"'{sample}'."


def _comment(text: str) -> list[str]:
    wrapped = textwrap.wrap(text, _WIDTH - 2, break_on_hyphens=False, break_long_words=False)
    return [f"# {line}" for line in wrapped]


_HEADER = f"""\
PicoBot configuration file.

Generated from the settings model by `picobot init`. Every key is shown with its
default value; delete what you do not change, since a missing key means the default.

Where PicoBot looks for this file: `picobot --config FILE`, else the path in
${CONFIG_ENV}, else ./config.toml. A file named by --config or ${CONFIG_ENV} must
exist; a broken file is an error naming every bad key, never a silent fallback.

Variables override this file: PICOBOT_<SECTION>__<KEY>, nested sections joined by
"__", e.g. PICOBOT_LLM__BASE_URL or PICOBOT_SESSION__MEMORY__CONTEXT_BUDGET_TOKENS,
from the environment, else ./{DEFAULT_ENV_FILE} (${ENV_FILE_ENV}), else a file of that
name in {DEFAULT_SECRETS_DIR} (${SECRETS_DIR_ENV}). Each key below names its variable; a
PICOBOT_* variable that is no setting is an error.

Secrets never go in this file: keys ending in _env name the variable that holds the
secret (an API key, a token), and PicoBot reads the secret from the environment, the
.env file or the secrets directory. A value that is not a variable name (a pasted key,
say) is refused without being shown.

Check your edits with `picobot check-config`.\
"""


def render_config(settings_cls: type[BaseModel] = Settings) -> str:
    """The commented ``config.toml`` for ``settings_cls``, every key at its default."""
    lines = [f"# {line}".rstrip() for line in _HEADER.splitlines()]
    for table in collect(settings_cls):
        if table.path or table.keys:
            lines.append("")
        if table.path:
            rule = "# " + "-" * (_WIDTH - 2)
            lines += [rule, *_comment(f"[{table.name}] {table.doc}".strip()), rule]
            if table.keys:
                lines.append(f"[{table.name}]")
        for key in table.keys:
            lines.append("")
            lines += _comment(key.description)
            if key.choices:
                lines += _comment("One of: " + ", ".join(toml_value(c) for c in key.choices) + ".")
            if key.constraints:
                lines += _comment("Allowed: " + ", ".join(key.constraints) + ".")
            if key.env_is_json:
                lines += _comment(
                    "In the environment, the value is JSON, e.g. " + _json_example(key)
                )
            lines.append(f"# env: {key.env}")
            if key.default is None:
                lines.append(f"# {key.name} = (unset by default)")
            else:
                lines.append(tomli_w.dumps({key.name: key.default}).rstrip("\n"))
    return "\n".join(lines).strip("\n") + "\n"


_MD_INTRO = f"""\
# Configuration

<!-- Generated by `python -m picobot.config.reference` from picobot/config/; do not edit. -->

PicoBot reads one TOML file plus `PICOBOT_*` variables. Every setting has a default,
so an empty file (or no file at all) is a working configuration.

## Sources and precedence

Highest priority first:

1. explicit values passed in code (`load_settings(**overrides)`, used by tests and
   embedding applications);
2. environment variables `PICOBOT_<SECTION>__<KEY>`;
3. the same variables in the `.env` file;
4. the same variables as files in the secrets directory;
5. the config file;
6. the defaults listed below.

The environment beats the files so that a one-off `PICOBOT_X=... picobot ...` always
wins; the `.env` file (your own edits) beats the secrets directory (mounted by the
platform); all of them beat the config file, so a deployment can change a key without
editing it.

## The config file

The file is, in order: the path given with `picobot --config FILE`, else the path in
`{CONFIG_ENV}`, else `./config.toml` if it exists. A file named by `--config` or
`{CONFIG_ENV}` must exist: a missing file is an error, not a silent fallback to the
defaults, and so is a directory in its place (also at `./config.toml`). Unknown keys,
values of the wrong type, invalid TOML and a file that is not UTF-8 are errors that
name the offending key (or line and column, or the first bad byte, counted from 1).

`picobot init` writes a commented `config.toml` with every key at its default (the same
text as [`config.toml.example`](../config.toml.example)); `picobot init --force`
overwrites an existing file, `-o PATH` writes elsewhere.

## Environment variables

Each key can be overridden as `PICOBOT_<SECTION>__<KEY>`, nested sections joined by
`__`, for example `PICOBOT_LLM__BASE_URL=http://127.0.0.1:11434/v1` or
`PICOBOT_SESSION__MEMORY__CONTEXT_BUDGET_TOKENS=6000` (names are not case-sensitive).
The tables below name the variable of every key. List values are JSON
(`'["a", "b"]'`); `PICOBOT_<SECTION>` sets a whole section as a JSON object, and a
variable of one of its keys refines it.

A `PICOBOT_*` variable that is no setting is an error naming it, with the closest
setting when there is one (`PICOBOT_SESSIONS__RETENTION__MAX_AGE_DAYS: no such setting;
did you mean PICOBOT_SESSION__RETENTION__MAX_AGE_DAYS?`): a mistyped override never
goes unnoticed. Not settings, and so allowed: `{CONFIG_ENV}`, `{ENV_FILE_ENV}`,
`{SECRETS_DIR_ENV}`, `PICOBOT_WS_KEY` (the default of `picobot tui --key-env`), and every
variable named by a `*_env` key, by default or in your configuration (such as
`PICOBOT_WS_API_KEYS`).

## The .env file and the secrets directory

The `.env` file is `./{DEFAULT_ENV_FILE}`, or the file named by `{ENV_FILE_ENV}`. Its lines are
`NAME=value`, with `#` comments, an optional `export`, and values bare, in single quotes
(literal) or in double quotes (`\\n`, `\\t`, `\\"` and `\\\\` escapes); a value
spans one line. A line PicoBot cannot read is an error that names its number but never
shows it. Its `PICOBOT_*` entries are checked like environment variables; other entries
can hold the secrets named by `*_env` keys (`OPENAI_API_KEY=...`).

The secrets directory is `{DEFAULT_SECRETS_DIR}` (where Docker and Kubernetes mount secrets),
or the directory named by `{SECRETS_DIR_ENV}`. Each file is one variable: its name is
the variable's name, its content (surrounding whitespace removed) the value. So
`{DEFAULT_SECRETS_DIR}/OPENAI_API_KEY` holds the key that `llm.api_key_env = "OPENAI_API_KEY"`
names, and `{DEFAULT_SECRETS_DIR}/PICOBOT_LLM__MODEL` sets `llm.model`. Files whose names do not
start with `PICOBOT_` are read only as secrets.

A missing `./{DEFAULT_ENV_FILE}` or `{DEFAULT_SECRETS_DIR}` is fine; one named by its variable must
exist, and one that exists but cannot be read is an error. Set the variable to nothing
(`{SECRETS_DIR_ENV}=`) to read none. `{CONFIG_ENV}`, `{ENV_FILE_ENV}` and
`{SECRETS_DIR_ENV}` are read from the process environment only.

## The data directory

`[data] dir` names it. Left empty (the default), it is `./data` when the working
directory holds a `config.toml` or a `data/` directory (a project directory, such as a
PicoBot checkout: `make run` keeps its data there), else the platform's user data
directory (`$XDG_DATA_HOME/picobot`, by default `~/.local/share/picobot`, on Linux;
`~/Library/Application Support/picobot` on macOS), so every other directory finds the
same database. `picobot status` prints the directory in use and why.

## Secrets

Secrets never sit in the file. Keys ending in `_env` (such as `llm.api_key_env`) hold
the *name* of the variable that contains the secret, and PicoBot reads the secret from
the environment, else the `.env` file, else the secrets directory, at run time. A value
that is not a variable name (letters, digits and `_`, not starting with a digit), such
as a key pasted there by mistake, is a config error that names the key and never shows
the value.

## Checking a file

`picobot check-config [FILE]` validates a file (by default the one PicoBot would load)
by itself, without the environment, and prints `FILE: ok`, or one line per bad key with
the reason on stderr, unknown keys included, and exits with status 3. It then checks the
`PICOBOT_*` variables (environment, `.env`, secrets directory) on top of the file; their
problems start with `environment:` and name the variable, e.g.
`environment: PICOBOT_LLM__TEMPERATURE (llm.temperature): Input should be less than or equal to 2`,
and the `.env` line or secrets file it came from. It runs the same validation as every
other command at start-up (one function), so a value it passes is one `serve` accepts;
only what lies outside the configuration, such as a secret's value or a server to reach,
is checked when a channel starts. Bounds (`Allowed:` in the tables) keep every value one
PicoBot works with; `inf` and `nan` are refused.

## Reference
"""


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_type(key: Key) -> str:
    if key.choices:
        kind = " \\| ".join(f"`{_md_cell(toml_value(c))}`" for c in key.choices)
    else:
        kind = key.type_name
    if key.constraints:
        kind += " (" + ", ".join(_md_cell(c) for c in key.constraints) + ")"
    if key.env_is_json:
        kind += " (JSON in the environment)"
    return kind


def render_markdown(settings_cls: type[BaseModel] = Settings) -> str:
    """The configuration reference (``docs/configuration.md``) for ``settings_cls``."""
    lines = [_MD_INTRO.rstrip("\n")]
    for table in collect(settings_cls):
        if not table.path and not table.keys:
            continue
        title = f"`[{table.name}]`" if table.path else "Top level"
        lines += ["", f"### {title}", ""]
        if table.doc:
            lines += [table.doc, ""]
        if table.children:
            subs = ", ".join(f"`[{child}]`" for child in table.children)
            lines += [f"Subsections: {subs}.", ""]
        if not table.keys:
            lines.pop()
            continue
        lines += [
            "| Key | Type | Default | Environment variable | Description |",
            "| --- | --- | --- | --- | --- |",
        ]
        for key in table.keys:
            default = _md_cell(toml_value(key.default))
            lines.append(
                f"| `{key.name}` | {_md_type(key)} | `{default}` | `{key.env}` "
                f"| {_md_cell(key.description)} |"
            )
    return "\n".join(lines) + "\n"


def write_generated(root: Path) -> list[Path]:
    """Regenerate ``config.toml.example`` and ``docs/configuration.md`` under ``root``."""
    written = []
    for relative, text in ((EXAMPLE_FILE, render_config()), (MARKDOWN_FILE, render_markdown())):
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":  # pragma: no cover - developer helper
    import argparse

    cli = argparse.ArgumentParser(
        prog="python -m picobot.config.reference",
        description=f"Regenerate {EXAMPLE_FILE} and {MARKDOWN_FILE} from the settings.",
    )
    cli.add_argument("root", nargs="?", default=".", help="the repository root (default: .)")
    for written_path in write_generated(Path(cli.parse_args().root)):
        print(f"wrote {written_path}")
