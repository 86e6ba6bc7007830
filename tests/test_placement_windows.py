"""Large placements solved a window at a time (formulations.placement_windows): every answer a
valid placement, never below its start, exact when one window is the whole cluster, and better
than PAL's greedy on full random rounds."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.bench import random_placement_round
from schedlab.formulations.placement_greedy import pal_greedy
from schedlab.formulations.placement_problem import PlacementInput, placement_objective
from schedlab.formulations.placement_round import solve_placement
from schedlab.formulations.placement_windows import search_windows, sub_input, window_nodes
from schedlab.solvers.registry import solver

PORTFOLIO = solver("portfolio")


def _valid(pi: PlacementInput, placement: dict[str, tuple[str, ...]]) -> None:
    used = [g for gpus in placement.values() for g in gpus]
    assert len(used) == len(set(used)) and set(used) <= set(pi.gpu_index)
    assert all(len(set(placement[job.id])) == job.num_gpus for job in pi.jobs)


def _exact(time_limit_s: float = 30.0):
    return lambda sub, left_s, sub_start: solve_placement(sub, PORTFOLIO, min(left_s, time_limit_s),
                                                          start=sub_start).placement


@pytest.mark.parametrize("seed", range(3))
def test_a_window_as_large_as_the_cluster_is_the_exact_model(seed):
    pi = random_placement_round(32, seed, np.random.default_rng(seed))
    greedy = pal_greedy(pi, np.random.default_rng(seed))
    found = search_windows(pi, greedy, 60.0, _exact(), window_gpus=len(pi.gpus))
    exact = solve_placement(pi, PORTFOLIO, 60.0, start=greedy)
    assert exact.status == "optimal"
    _valid(pi, found.placement)
    assert placement_objective(pi, found.placement) == pytest.approx(exact.objective, abs=1e-6)


def test_a_window_frees_only_the_jobs_inside_it_and_their_gpus():
    pi = random_placement_round(256, 1, np.random.default_rng(1))
    greedy = pal_greedy(pi, np.random.default_rng(1))
    nodes = window_nodes(pi, greedy, 0, window_gpus=32)
    sub = sub_input(pi, greedy, nodes)
    assert len(nodes) >= 8 and {g.node for g in sub.gpus} <= set(nodes)
    for job in sub.jobs:
        assert set(greedy[job.id]) <= {g.id for g in sub.gpus}
    outside = {g for job in pi.jobs if job not in sub.jobs for g in greedy[job.id]}
    assert not outside & {g.id for g in sub.gpus}
    # the window's objective moves the whole objective by as much: jobs outside keep their terms
    shuffled = dict(greedy)
    ids = [g.id for g in sub.gpus]
    for job in sub.jobs:
        shuffled[job.id], ids = tuple(ids[-job.num_gpus:]), ids[:-job.num_gpus]
    delta_sub = placement_objective(sub, shuffled) - placement_objective(sub, greedy)
    assert placement_objective(pi, shuffled) - placement_objective(pi, greedy) == pytest.approx(delta_sub, abs=1e-9)


def test_windows_beat_pal_greedy_on_a_full_512_gpu_round():
    pi = random_placement_round(512, 0, np.random.default_rng(0))
    greedy = pal_greedy(pi, np.random.default_rng(0))
    result = solve_placement(pi, PORTFOLIO, time_limit_s=3.0, start=greedy)
    _valid(pi, result.placement)
    assert result.status == "time_limit"
    assert result.objective > placement_objective(pi, greedy) + 1e-6
