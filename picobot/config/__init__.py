"""Settings: the pydantic-settings root, its sections, channel sections, the reference generator."""
