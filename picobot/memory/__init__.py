"""Learned memory: facts the bot learns from conversations, their lifecycle and rendering."""
