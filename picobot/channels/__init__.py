"""Chat channels: each adapts one transport to the kernel's Inbound/Outbound contract."""
