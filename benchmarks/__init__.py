"""Issue 7 benchmarks for rackctl (see README.md in this folder; run benchmarks/run.py)."""
