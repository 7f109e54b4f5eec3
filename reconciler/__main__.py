"""``python -m reconciler`` runs the rackctl CLI."""

from reconciler.cli.main import run

run()
