"""LP-first solving (solvers.highs_direct) reaches the full MIP's optimum, and its bound holds."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from brute_force import best_objective, feasible_choices
from conftest import tiny_round

from schedlab.bench import random_round
from schedlab.formulations.goodput import build_arrays
from schedlab.formulations.options import enumerate_options
from schedlab.solvers import highs_direct
from schedlab.solvers.highs_direct import solve_highs
from schedlab.state import Settings


def _path(message: str) -> str:
    return message.split(",")[0].split(" and ")[0]


def test_lp_first_and_full_mip_reach_the_brute_force_optimum():
    rng = np.random.default_rng(11)
    paths = Counter()
    for _ in range(120):
        base = tiny_round(rng, max_jobs=5)
        for p in (1.0, -1.0, -math.inf):
            ri = replace(base, settings=replace(base.settings, p=p))
            expected = best_objective(enumerate_options(ri, prune=False),
                                      feasible_choices(enumerate_options(replace(ri, settings=Settings(p=1.0)), prune=False)))
            arrays = build_arrays(enumerate_options(ri))
            tol = 1e-6 * max(1.0, abs(expected))
            for lp_first in (True, False):
                out = solve_highs(arrays, 30.0, 0.0, lp_first=lp_first)
                assert out.status == "optimal"
                assert out.objective == pytest.approx(expected, abs=tol), (p, lp_first, out.message)
                assert out.bound >= expected - tol
                paths[_path(out.message)] += lp_first
    assert paths["LP relaxation integral"] > 0


@pytest.mark.parametrize("ipm_min_rows", [highs_direct.IPM_MIN_ROWS, 0], ids=["relaxation by simplex", "by IPM"])
def test_neighbourhood_points_are_within_the_gap_of_the_full_optimum(ipm_min_rows, monkeypatch):
    """The relaxation of the largest rounds is solved by interior point (with crossover): its
    vertex must serve the neighbourhood search as the simplex's does."""
    monkeypatch.setattr(highs_direct, "IPM_MIN_ROWS", ipm_min_rows)
    rng = np.random.default_rng(5)
    paths = Counter()
    for _ in range(12):
        ri = random_round(rng, 512, 250, settings=Settings(p=-1.0))
        arrays = build_arrays(enumerate_options(ri))
        full = solve_highs(arrays, 60.0, 0.0, lp_first=False)
        fast = solve_highs(arrays, 60.0, 1e-4)
        assert full.status == fast.status == "optimal"
        scale = abs(full.objective)
        assert fast.bound >= full.objective - 1e-9 * scale  # the LP bound is a bound
        assert fast.objective >= full.objective - 1e-4 * scale
        assert fast.objective <= full.objective + 1e-9 * scale
        assert arrays.max_violation(fast.values) <= 1e-9
        paths[_path(fast.message)] += 1
    assert paths["LP first: MIP over the fractional jobs"] > 0, paths
