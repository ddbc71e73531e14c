"""PicoBot's benchmark suite: ``make bench`` (``python -m bench``); see docs/performance.md."""
