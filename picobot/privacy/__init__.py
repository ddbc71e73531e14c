"""Privacy: purges, secret redaction, export and the retention policy."""
