"""``python -m picobot`` runs the command-line interface."""

import sys

from picobot.cli.main import main

sys.exit(main())
