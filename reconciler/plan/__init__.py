"""The plan: what would change, why, and what it was made from."""
