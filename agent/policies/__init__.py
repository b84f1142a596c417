"""Offline policies: agents that need no API, driven by the analyzers and the checks' structured results."""
