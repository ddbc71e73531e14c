"""Webhook channels: one aiohttp route per platform, one module per platform."""
