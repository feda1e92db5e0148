"""Grading keys: per lab, the evidence its derived questions are marked against, rebuilt from the evidence store, parse, analysis and measure (never a lab's glue)."""
