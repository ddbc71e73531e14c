"""Background work: the task supervisor and the jobs it runs (summarization, retention)."""
