"""The conversation's tables: sessions, messages, summaries, tool records, notes, events."""
