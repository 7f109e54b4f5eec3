"""Adoption of a running cluster (``rackctl import``): live Slurm files x inventory -> an intent.

``live`` reads the config dir strictly; ``draft`` infers the intent: racks and slices
(``racks``), tiers and the IMEX policy (``tiers``); ``yamltext`` writes it with its comments;
``check`` plans it against the same files to choose ``maxJobSpan`` and to list what the first
plan would change.
"""
