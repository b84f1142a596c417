"""One module per static rule family; the engine runs them all over one parsed module."""
