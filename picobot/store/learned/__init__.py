"""Learned memory's tables: facts (rules, rows, writes, purges), digests, reflections, pins."""
