"""``python -m picobot`` runs the command-line interface."""

import sys

from picobot.cli import main

sys.exit(main())
