"""The interval bench/bench_spans.py puts around what spans add."""

from __future__ import annotations

import random
import sys
from math import comb
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_spans import median_interval  # noqa: E402


@pytest.mark.parametrize(("n", "low", "high"), [(15, 4, 12), (21, 6, 16), (31, 10, 22)])
def test_the_interval_is_the_sign_tests(n, low, high):
    values = [float(v) for v in random.Random(n).sample(range(1000), n)]
    ordered = sorted(values)
    median, lo, hi = median_interval(values)
    assert median == ordered[n // 2]
    # the `low`-th and `high`-th smallest (counting from 1), as sign test tables give them
    assert (lo, hi) == (ordered[low - 1], ordered[high - 1])
    outside = sum(comb(n, k) for k in range(low)) * 2 / 2**n
    assert outside <= 0.05 < outside + comb(n, low) * 2 / 2**n


def test_too_few_values_give_their_whole_range():
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)


def test_the_interval_holds_the_median_as_often_as_it_says():
    rng = random.Random(7)
    held = sum(
        lo <= 0.0 <= hi
        for lo, hi in (median_interval([rng.gauss(0, 1) for _ in range(21)])[1:] for _ in range(2000))
    )
    assert held / 2000 >= 0.95 - 0.015
