"""Grading providers, one module per lab: the evidence each derived question is marked against, rebuilt in the grader's process."""
