"""The command line: arguments parsed, the engine called, exit codes."""
