"""Outbound connections: channels that fetch their messages instead of receiving webhooks."""
