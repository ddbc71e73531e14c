"""Purges and erasure (counts, deletes, verified erasure), the export's reads, the legacy import."""
