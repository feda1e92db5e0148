"""Grading keys: per lab, the evidence the grader marks derived questions against (docs/CONTRACTS.md)."""
