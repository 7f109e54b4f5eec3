"""Reading input text: YAML with line numbers, JSON Schema validation, Slurm hostlists."""
