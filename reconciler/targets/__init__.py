"""Scheduler targets. Each reads its live state and applies the desired state; see ``slurm``."""
