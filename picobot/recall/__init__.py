"""Recall helpers shared by the prompt, search and tools: the query side of recall by meaning."""
