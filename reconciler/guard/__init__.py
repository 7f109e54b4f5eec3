"""The boundaries of untrusted input: inert text, scrubbed secrets, bounded waits and reads, no-follow files."""
