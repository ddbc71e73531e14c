"""The PostgreSQL store backend."""
