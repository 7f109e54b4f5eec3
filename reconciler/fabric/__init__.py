"""The discovered NVLink fabric: domains, cliques, trays and their findings."""
