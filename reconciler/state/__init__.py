"""rackctl's own records: the state dir, its lock, backups, journal and history."""
