"""``PICOBOT_*`` variables to settings input, naming each variable that is no setting.

``PICOBOT_<SECTION>__<KEY>`` (nested sections joined by ``__``, any case) sets one key;
``PICOBOT_<SECTION>`` sets a whole section as a JSON object; list keys take JSON. The
mapping walks the settings model itself, so every value is parsed through its field's
type, and every problem names the variable (and the ``.env`` line or secrets file) it
came from. A ``PICOBOT_*`` variable that maps to no setting is an error, with the
closest real name as a suggestion, except the names PicoBot reads on purpose: the
bootstrap variables, and the secrets named by ``*_env`` keys (defaults and values).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from picobot.config.sections import is_env_name
from picobot.config.sources import BOOTSTRAP, MASTER_KEY_ENV, PREFIX, REMOTE_KEY_ENV, Variable
from picobot.errors import UNREADABLE_JSON

DELIMITER = "__"
Path_ = tuple[str, ...]
_SECTION_EXAMPLE = 'an object such as {"key": 1}'
_LIST_EXAMPLE = 'a list such as ["a", "b"]'


@dataclass(slots=True)
class EnvInput:
    """What the variables set: nested input data, who set each key, and the problems."""

    data: dict[str, Any] = field(default_factory=dict)
    provenance: dict[Path_, Variable] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def variable_of(self, loc: Iterable[str]) -> Variable | None:
        """The variable that set ``loc`` or the nearest section holding it, if one did."""
        parts = tuple(loc)
        for end in range(len(parts), 0, -1):
            var = self.provenance.get(parts[:end])
            if var is not None:
                return var
        return None


def env_input(
    model: type[BaseModel],
    variables: Iterable[Variable],
    *,
    configured: Iterable[Mapping[str, Any]] = (),
    secret_names: Iterable[str] = (),
) -> EnvInput:
    """Map ``variables`` onto ``model``; of two setting one key, the higher priority wins.

    ``configured`` are the other inputs (file data, init values), searched for ``*_env``
    values: the variables they name are secrets, not typos. ``secret_names`` are more such
    names (``tui --key-env``).
    """
    out = EnvInput()
    strays: list[Variable] = []
    # Sections before their keys, so PICOBOT_LLM__MODEL refines PICOBOT_LLM='{...}'.
    ranked = sorted(variables, key=lambda var: (var.priority, var.name.count(DELIMITER)))
    for var in ranked:
        target = _target(model, var.name)
        if target is None:
            strays.append(var)
            continue
        path, info = target
        try:
            value = _value(var.value, info)
        except UNREADABLE_JSON:
            example = _SECTION_EXAMPLE if info is None else _LIST_EXAMPLE
            out.problems.append(f"{var.label}: cannot parse the value: it must be JSON, {example}")
            continue
        _merge(out, path, value, var)
    allowed = _secret_names(model, [out.data, *configured], secret_names)
    for var in strays:
        if var.name.upper() not in allowed:
            out.problems.append(_unknown(model, var))
    return out


def _target(model: type[BaseModel], name: str) -> tuple[Path_, FieldInfo | None] | None:
    """The settings path ``name`` sets and its field (None for a section), or None."""
    if not name.upper().startswith(PREFIX):
        return None
    parts = name[len(PREFIX) :].lower().split(DELIMITER)
    current: type[BaseModel] | None = model
    info: FieldInfo | None = None
    for part in parts:
        if current is None or part not in current.model_fields:
            return None
        info = current.model_fields[part]
        current = _section(info)
    return tuple(parts), (None if current is not None else info)


def _section(info: FieldInfo) -> type[BaseModel] | None:
    kind = info.annotation
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def _value(raw: str, info: FieldInfo | None) -> Any:
    """A section's or a list's value is JSON; any other is left to its field's type."""
    if info is None:
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        return value
    kind = info.annotation
    if get_origin(kind) in (list, dict, set, tuple) or kind in (list, dict, set, tuple):
        return json.loads(raw)
    return raw


def _merge(out: EnvInput, path: Path_, value: Any, var: Variable) -> None:
    node = out.data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    below = node.get(path[-1])
    node[path[-1]] = deep_merge(below, value) if isinstance(below, dict) else value
    # Only the keys it holds: a file key beside them in the same section is the file's.
    for leaf in _leaves(value, path):
        out.provenance[leaf] = var


def deep_merge(base: dict[str, Any], top: Any) -> Any:
    """``top`` over ``base``: tables merge key by key, any other value replaces."""
    if not isinstance(top, dict):
        return top
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        out[key] = deep_merge(below, value) if isinstance(below, dict) else value
    return out


def _leaves(value: Any, path: Path_) -> Iterator[Path_]:
    if not isinstance(value, dict):
        yield path
        return
    for key, child in value.items():
        yield from _leaves(child, (*path, str(key)))


def _secret_names(
    model: type[BaseModel], inputs: Iterable[Mapping[str, Any]], extra: Iterable[str]
) -> set[str]:
    """Upper-cased names PicoBot reads on purpose: bootstrap, ``*_env`` defaults and values."""
    names = {*BOOTSTRAP, REMOTE_KEY_ENV, MASTER_KEY_ENV} | {name.upper() for name in extra}
    paths = list(_env_name_fields(model, ()))
    names |= {str(info.default).upper() for _, info in paths}
    for data in inputs:
        for path, _ in paths:
            value = _lookup(data, path)
            if isinstance(value, str):
                names.add(value.upper())
    return names


def _env_name_fields(model: type[BaseModel], path: Path_) -> Iterator[tuple[Path_, FieldInfo]]:
    for name, info in model.model_fields.items():
        section = _section(info)
        if section is not None:
            yield from _env_name_fields(section, (*path, name))
        elif is_env_name(info):
            yield (*path, name), info


def _lookup(data: Any, path: Path_) -> Any:
    for part in path:
        data = data.get(part) if isinstance(data, Mapping) else None
    return data


def setting_names(model: type[BaseModel], path: Path_ = ()) -> Iterator[str]:
    """Every variable that sets a section or a key of ``model``."""
    for name, info in model.model_fields.items():
        here = (*path, name)
        yield PREFIX + DELIMITER.join(here).upper()
        section = _section(info)
        if section is not None:
            yield from setting_names(section, here)


def _unknown(model: type[BaseModel], var: Variable) -> str:
    # Suggest only names PicoBot itself defines: a configured *_env value may be a secret.
    defaults = (str(info.default) for _, info in _env_name_fields(model, ()))
    candidates = [*setting_names(model), *BOOTSTRAP, REMOTE_KEY_ENV, MASTER_KEY_ENV, *defaults]
    close = difflib.get_close_matches(var.name.upper(), candidates, n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]}?" if close else ""
    return (
        f"{var.label}: no such setting (settings are PICOBOT_<SECTION>__<KEY>, see"
        f" docs/configuration.md){hint}"
    )
