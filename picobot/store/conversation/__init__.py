"""The conversation's tables: sessions, messages, summaries, tool records, user memories, events, the timeline."""
