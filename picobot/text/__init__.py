"""Leaf helpers on text: token counting and the marking of untrusted data."""
