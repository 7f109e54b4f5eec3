"""``python -m reconciler`` runs the rackctl CLI."""

import sys

from .cli import main

sys.exit(main())
