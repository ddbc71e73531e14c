"""The kernel: turn orchestration, commands, permissions and prompt context."""
