"""Learned memory's tables: facts (rules, rows, writes, purges, paraphrases), digests and reflections, message pins."""
