"""Interval arithmetic checked by hand and against a brute-force grid."""
from __future__ import annotations

import random

from infralens_lab.analysis import intervals as iv


def test_by_hand():
    assert iv.union([(5, 7), (0, 2), (1, 3), (4, 4), (9, 8)]) == [(0, 3), (5, 7)]
    assert iv.subtract([(0, 10)], [(2, 3), (5, 6), (9, 12)]) == [(0, 2), (3, 5), (6, 9)]
    assert iv.subtract([(0, 2), (4, 6)], [(1, 5)]) == [(0, 1), (5, 6)]
    assert iv.subtract([(0, 1)], []) == [(0, 1)] and iv.subtract([], [(0, 1)]) == []
    assert iv.length(iv.union([(0, 2), (1, 3)])) == 3


def test_against_a_grid():
    rng = random.Random(7)
    for _ in range(200):
        a = [(x, x + rng.randint(0, 6)) for x in (rng.randint(0, 40) for _ in range(rng.randint(0, 6)))]
        b = [(x, x + rng.randint(0, 6)) for x in (rng.randint(0, 40) for _ in range(rng.randint(0, 6)))]
        grid = sum(1 for t in range(50) if any(s <= t < e for s, e in a) and not any(s <= t < e for s, e in b))
        assert iv.length(iv.subtract(a, b)) == grid


def test_hidden_by_hand():
    # union of (0, 4), (2, 6) is 6 long; (1, 3) and (5, 9) cover 2 + 1 of it
    assert iv.hidden([(0, 4), (2, 6)], [(1, 3), (5, 9)]) == (6.0, 3.0)
    assert iv.hidden([], [(0, 1)]) == (0.0, 0.0) and iv.hidden([(0, 2)], []) == (2.0, 0.0)
