"""Experiment drivers behind the book's notebooks: one module per section, each a frozen
settings dataclass (CPU default + ``paper()``) and functions from settings to arrays."""
