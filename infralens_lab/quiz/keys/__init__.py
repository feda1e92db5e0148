"""The grader's evidence providers, one module per lab: each rebuilds, from the recorded set and the analysis layer alone, the table a derived question is marked against."""
