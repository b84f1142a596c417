"""What is truly generic: atomic files, JSON lines, path globs, text cuts. Imports nothing of `agent`."""
