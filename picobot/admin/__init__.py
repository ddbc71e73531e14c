"""Operator interfaces: the admin HTTP API (and its OpenAPI document)."""
