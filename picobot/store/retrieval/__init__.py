"""Recall's tables and ranking: the per-user term index, its writes, message vectors, ranked recall."""
