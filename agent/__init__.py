"""perfagent: propose performance edits, prove them safe, measure them, report what they cost."""

__version__ = "0.1.0"
