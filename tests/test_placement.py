"""PAL placement: the exact model's linearization, its bound over the greedy, feasibility of all."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.errors import InputError
from schedlab.formulations.placement import (PlacementGpu, PlacementInput, PlacementJob, job_speed,
                                              placement_objective, solve_placement)
from schedlab.policies.placement import PLACEMENT_POLICIES, pal_greedy

CLASSES = ("classA", "classB")


def tiny(seed: int, nodes: int = 2, per_node: int = 2, restart_penalty: float = 0.0) -> PlacementInput:
    rng = np.random.default_rng(seed)
    gpus = tuple(PlacementGpu(f"g{n}{k}", f"n{n}", {c: float(rng.choice([1.0, 1.1, 1.3])) for c in CLASSES})
                 for n in range(nodes) for k in range(per_node))
    total, jobs, idle = len(gpus), [], [g.id for g in gpus]
    while True:
        size = int(rng.integers(1, 4))
        if sum(j.num_gpus for j in jobs) + size > total:
            break
        current = ()
        if rng.random() < 0.5 and len(idle) >= size:  # some jobs run on a random slice of the GPUs
            current = tuple(str(g) for g in rng.choice(idle, size, replace=False))
            idle = [g for g in idle if g not in current]
        jobs.append(PlacementJob(f"j{len(jobs)}", size, CLASSES[rng.integers(2)], current, float(rng.uniform(0.5, 2))))
    return PlacementInput(gpus, tuple(jobs), across_node=1.7, restart_penalty=restart_penalty)


def brute_force(pi: PlacementInput) -> float:
    """Best objective over every assignment of GPUs to jobs (direct max, no linearization)."""
    ids = [g.id for g in pi.gpus]
    best = -np.inf
    for perm in itertools.permutations(ids):
        placement, start = {}, 0
        for job in pi.jobs:
            placement[job.id] = tuple(sorted(perm[start:start + job.num_gpus]))
            start += job.num_gpus
        best = max(best, placement_objective(pi, placement))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_worst_slowdown_linearization_equals_a_direct_max(seed):
    pi = tiny(seed, restart_penalty=0.3)
    result = solve_placement(pi)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(brute_force(pi), abs=1e-6)
    assert solve_placement(pi, "cpsat").objective == pytest.approx(result.objective, abs=1e-6)  # the twin


@pytest.mark.parametrize("seed", range(8))
def test_exact_placement_is_never_worse_than_pal_greedy(seed):
    pi = tiny(seed, nodes=4, per_node=4, restart_penalty=0.1)
    exact = solve_placement(pi)
    assert exact.status == "optimal"
    greedy = placement_objective(pi, pal_greedy(pi, np.random.default_rng(seed)))
    assert exact.objective >= greedy - 1e-9


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(sorted(PLACEMENT_POLICIES)))
def test_every_placement_is_capacity_feasible(seed, policy):
    pi = tiny(seed, nodes=3, per_node=4)
    placement = PLACEMENT_POLICIES[policy](pi, np.random.default_rng(seed))
    used = [g for gs in placement.values() for g in gs]
    assert len(used) == len(set(used)) and set(used) <= set(pi.gpu_index)
    assert all(len(placement[j.id]) == j.num_gpus for j in pi.jobs)


def test_a_gpu_current_for_two_jobs_is_refused():
    gpus = (PlacementGpu("a", "n0", {"classA": 1.0}), PlacementGpu("b", "n0", {"classA": 1.0}))
    with pytest.raises(InputError, match="GPU a is current for both j and k"):
        PlacementInput(gpus, (PlacementJob("j", 1, "classA", ("a",)), PlacementJob("k", 1, "classA", ("a",))))


def test_speed_is_one_over_worst_slowdown_times_locality():
    gpus = (PlacementGpu("a", "n0", {"classA": 1.0}), PlacementGpu("b", "n0", {"classA": 1.25}),
            PlacementGpu("c", "n1", {"classA": 1.0}))
    pi = PlacementInput(gpus, (PlacementJob("j", 2, "classA"),), across_node=2.0)
    job = pi.jobs[0]
    assert job_speed(pi, job, ("a", "b")) == pytest.approx(0.8)
    assert job_speed(pi, job, ("a", "c")) == pytest.approx(0.5)
    assert solve_placement(pi).placement == {"j": ("a", "b")}  # slow GPU beats spreading at L = 2
    wide = PlacementInput(gpus, pi.jobs, across_node=1.1)
    assert solve_placement(wide).placement == {"j": ("a", "c")}  # and loses at L = 1.1


def test_warm_started_exact_placement_under_a_time_limit_is_never_worse_than_its_start():
    rng = np.random.default_rng(3)
    gpus = tuple(PlacementGpu(f"g{n}/{k}", f"n{n}", {c: float(rng.uniform(0.95, 1.2)) for c in CLASSES})
                 for n in range(16) for k in range(4))
    sizes = [8, 4, 4, 2, 2, 1, 1, 1, 4, 8, 2, 1, 4, 2, 8, 4, 1, 2]
    jobs = tuple(PlacementJob(f"j{i}", s, CLASSES[i % 2]) for i, s in enumerate(sizes))
    pi = PlacementInput(gpus, jobs)
    greedy = pal_greedy(pi, rng)
    result = solve_placement(pi, time_limit_s=0.05, start=greedy)
    assert result.objective >= placement_objective(pi, greedy) - 1e-9


def test_a_solver_out_of_time_before_any_point_answers_with_its_start_flagged():
    # CP-SAT at a 50 ms limit can stop before its first point (PAL's replay met it); the
    # warm start is then the answer, flagged as not proven, never an error.
    rng = np.random.default_rng(3)
    gpus = tuple(PlacementGpu(f"g{n}/{k}", f"n{n}", {c: float(rng.uniform(0.95, 1.2)) for c in CLASSES})
                 for n in range(64) for k in range(4))
    jobs = tuple(PlacementJob(f"j{i}", [1, 2, 4, 8][i % 4], CLASSES[i % 2]) for i in range(60))
    pi = PlacementInput(gpus, jobs)
    greedy = pal_greedy(pi, rng)
    result = solve_placement(pi, "cpsat", time_limit_s=0.001, start=greedy)
    assert result.status == "time_limit"
    assert result.placement == {j: tuple(sorted(g)) for j, g in greedy.items()}
    with pytest.raises(RuntimeError, match="cpsat found no placement"):
        solve_placement(pi, "cpsat", time_limit_s=0.001)
