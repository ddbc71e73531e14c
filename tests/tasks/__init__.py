"""Tests of picobot.tasks."""
