"""Tests of user memories: repository, key rules, tool, commands and permissions."""
