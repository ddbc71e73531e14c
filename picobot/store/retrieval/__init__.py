"""Recall's tables and ranking: the per-user term index, message vectors, ranked recall."""
