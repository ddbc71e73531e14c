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

from picobot.config.prose import HEADER, MD_INTRO
from picobot.config.settings import Settings

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


def render_config(settings_cls: type[BaseModel] = Settings) -> str:
    """The commented ``config.toml`` for ``settings_cls``, every key at its default."""
    lines = [f"# {line}".rstrip() for line in HEADER.splitlines()]
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
    lines = [MD_INTRO.rstrip("\n")]
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
