"""The recall evaluation (``make eval``, ``python -m bench.recall``); see docs/eval.md."""
