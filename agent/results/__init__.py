"""What a run leaves and how to read it: below both batch/ (which writes it) and review/ (which shows it)."""
