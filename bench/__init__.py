"""PicoBot's benchmark suite: ``make bench`` (``python -m bench``); see docs/performance.md.

The ratios are measured with recall by meaning off (``[embeddings] provider = "none"``,
here and in every server a bench starts, unless the environment says otherwise); the
``vectors`` bench and ``make eval --embeddings`` turn it on explicitly and report it as
figures of their own.
"""

import os

os.environ.setdefault("PICOBOT_EMBEDDINGS__PROVIDER", "none")
