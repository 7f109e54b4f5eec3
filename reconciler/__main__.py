"""``python -m reconciler`` runs the rackctl CLI."""

from .cli import run

run()
