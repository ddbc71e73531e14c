"""Channel state: the webhook inbox and outbound queue, the replay guard, transports' saved state."""
