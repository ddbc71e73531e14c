"""PicoBot: a self-hosted, multi-channel chat bot kernel with memory and privacy controls."""

__version__ = "0.1.0"

DISTRIBUTION = "picobot-kernel"
"""The name PicoBot is published and installed under (``pip install picobot-kernel``).

The import name is ``picobot``, but ``picobot`` on the package index is another
project: every install hint names this distribution, never the import name.
"""
