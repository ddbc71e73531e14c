"""Channel state: the webhook inbox, the outbound queue, the replay guard, transports' state."""
