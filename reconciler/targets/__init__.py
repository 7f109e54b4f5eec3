"""The schedulers rackctl renders to: each one reads its live state, diffs and applies."""
