"""Inventory: NodeReports (one per host) and the sources that produce them."""
