"""The Slurm target: topology/block files, partitions, per-job IMEX, the running controller."""
