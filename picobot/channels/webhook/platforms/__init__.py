"""Webhook platforms: one module per platform, each a parser/verifier and a sender."""
