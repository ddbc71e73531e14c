"""PicoBot: a self-hosted, multi-channel chat bot kernel with memory and privacy controls."""

__version__ = "0.1.0"
