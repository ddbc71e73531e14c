"""The base class of every config section, and the type of ``*_env`` keys."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

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


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, docstrings document."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)
