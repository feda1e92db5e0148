"""quiz."""
