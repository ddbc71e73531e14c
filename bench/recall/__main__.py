"""``python -m bench.recall``: see :mod:`bench.recall.cli`."""

import sys

from bench.recall.cli import main

sys.exit(main())
