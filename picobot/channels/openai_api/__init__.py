"""The OpenAI-compatible chat endpoint: ``server`` (HTTP), ``turn`` (rendering), ``wire``."""
