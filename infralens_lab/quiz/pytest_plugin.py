"""pytest plugin for grading notebooks with nbval (full version in progress; a no-op for now)."""
from __future__ import annotations


def pytest_addoption(parser):
    group = parser.getgroup("infralens", "InfraLens Lab grading")
    group.addoption("--infralens-grade", action="store_true", default=False,
                    help="grade mode: a wrong or unanswered quiz check fails its cell")
    group.addoption("--infralens-score-csv", default=None, metavar="PATH",
                    help="write the score summary as CSV (grade mode)")
    group.addoption("--infralens-score-junit", default=None, metavar="PATH",
                    help="write the score summary as JUnit XML (grade mode)")
