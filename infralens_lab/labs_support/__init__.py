"""Per-lab glue: the setups, tables and figure inputs one notebook needs, so its cells stay thin."""
