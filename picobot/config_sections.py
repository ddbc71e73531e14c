"""The base class of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, docstrings document."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)
