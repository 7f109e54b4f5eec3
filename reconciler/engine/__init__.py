"""One run end to end: compute a plan, apply it, reconcile periodically."""
