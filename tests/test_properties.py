"""Property tests: whatever the round, no answer breaks capacity, bounds or one-config-per-job."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from brute_force import best_objective, feasible_choices
from conftest import needs_pyomo_solver, tiny_round
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab import solve_round
from schedlab.bench import random_round
from schedlab.bench.rounds import mixed_pools
from schedlab.formulations.goodput import GoodputModel, decode, min_job_speedup
from schedlab.formulations.greedy import greedy_choice, max_min_choice
from schedlab.formulations.options import enumerate_options
from schedlab.solvers.pyomo_options import LEGACY_OPTIONS
from schedlab.state import Settings


def _assert_valid(ri, allocations):
    gpus = {n.id: n.gpus for n in ri.cluster.nodes}
    jobs = {j.id: j for j in ri.jobs}
    assert Counter(a.job_id for a in allocations) == Counter(jobs.keys())  # exactly one entry per job
    used = Counter()
    for a in allocations:
        assert len(set(a.gpus)) == len(a.gpus)
        for g in a.gpus:
            assert 0 <= g.gpu < gpus[g.node]
            used[g.node] += 1
        assert a.num_gpus == 0 or jobs[a.job_id].min_gpus <= a.num_gpus <= jobs[a.job_id].max_gpus
    assert all(used[n] <= gpus[n] for n in used)
    assert len({(a.job_id, g) for a in allocations for g in a.gpus}) == sum(used.values())
    holders = Counter(g for a in allocations for g in a.gpus)
    assert all(v == 1 for v in holders.values())


rounds = st.builds(
    lambda seed, gpus, jobs, p, gpn: (np.random.default_rng(seed), gpus, jobs, p, gpn),
    st.integers(0, 2**32 - 1), st.sampled_from([4, 8, 16, 32, 64]), st.integers(0, 60),
    st.sampled_from([1.0, 0.0, -0.5, -1.0, -math.inf]), st.sampled_from([2, 4, 8]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds)
def test_solved_rounds_are_always_valid(args):
    rng, gpus, jobs, p, gpn = args
    ri = random_round(rng, max(gpus, gpn), jobs, gpus_per_node=gpn, settings=Settings(p=p))
    result = solve_round(ri)
    assert result.status == "optimal", result.message  # a fallback would be valid, and wrong here
    _assert_valid(ri, result.allocations)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1.0, -1.0, -math.inf]))
def test_solve_round_reaches_the_brute_force_optimum(seed, p):
    ri = tiny_round(np.random.default_rng(seed), p=p, max_jobs=4, max_nodes=3)
    opts = enumerate_options(ri, prune=False)
    expected = best_objective(opts, feasible_choices(enumerate_options(replace(ri, settings=Settings(p=1.0)), prune=False)))
    result = solve_round(ri)
    assert result.status == "optimal", result.message
    assert result.objective == pytest.approx(expected, abs=1e-6 * max(1.0, abs(expected)))
    _assert_valid(ri, result.allocations)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1.0, -1.0, -math.inf]))
def test_greedy_fallback_is_always_valid_even_with_odd_running_placements(seed, p):
    ri = tiny_round(np.random.default_rng(seed), p=p, max_jobs=8, max_nodes=4)
    opts = enumerate_options(ri)
    allocations = decode(opts, greedy_choice(opts))
    _assert_valid(ri, allocations)
    for job in ri.jobs:  # running jobs are never moved by the fallback
        a = next(a for a in allocations if a.job_id == job.id)
        assert not a.restarted


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_max_min_floor_serves_every_job_validly_and_never_above_the_optimum(seed):
    ri = tiny_round(np.random.default_rng(seed), p=-math.inf, max_jobs=6, max_nodes=3)
    opts = enumerate_options(ri, prune=False)
    served = max_min_choice(opts)
    if served is None:
        return
    assert np.bincount(opts.job[served], minlength=opts.num_jobs).tolist() == [1] * opts.num_jobs
    allocations = decode(opts, served)
    _assert_valid(ri, allocations)
    assert all(a.gpus for a in allocations)
    floor = min_job_speedup(opts, served.astype(float))
    assert floor > 0
    best = best_objective(opts, feasible_choices(enumerate_options(replace(ri, settings=Settings(p=1.0)), prune=False)))
    assert GoodputModel(opts).objective(served.astype(float)) <= best + 1e-6 * max(1.0, abs(best))


def test_a_max_min_round_out_of_time_serves_every_job_where_the_greedy_of_value_would_not():
    # 40 GPUs in 8-GPU nodes of three types, 32 jobs: the greedy of value leaves 21 jobs without
    # GPUs (t = 0); the floor serves every job at t = 0.61, the optimum at 0.65
    ri = random_round(np.random.default_rng(2176), 40, 32, gpus_per_node=8, settings=Settings(p=-math.inf),
                      pools=mixed_pools(40, ("v100", "p100", "k80"), gpus_per_node=8))
    opts = enumerate_options(ri)
    assert not all(a.gpus for a in decode(opts, greedy_choice(opts)))
    result = solve_round(ri, time_limit_s=1e-9)  # spent before a solver starts: the floor answers
    assert result.status == "fallback"
    assert all(a.gpus for a in result.allocations)
    assert min(a.speedup for a in result.allocations) > 0.5


@pytest.mark.parametrize("solver", [pytest.param(name, marks=needs_pyomo_solver(name)) for name in LEGACY_OPTIONS])
@pytest.mark.parametrize("seed", range(12))
def test_every_installed_pyomo_solver_reaches_the_brute_force_optimum(solver, seed):
    ri = tiny_round(np.random.default_rng(seed), p=[1.0, -1.0, -math.inf][seed % 3], max_jobs=4, max_nodes=3)
    expected = best_objective(enumerate_options(ri, prune=False), feasible_choices(
        enumerate_options(replace(ri, settings=Settings(p=1.0)), prune=False)))
    result = solve_round(ri, solver=solver, time_limit_s=30)
    assert result.status == "optimal", result.message
    assert result.objective == pytest.approx(expected, abs=1e-6 * max(1.0, abs(expected)))
    _assert_valid(ri, result.allocations)


@needs_pyomo_solver("cbc")
def test_a_mip_start_handed_back_as_optimal_is_not_believed(monkeypatch):
    # CBC 2.10 once returned its MIP start as "optimal" (-85.5 where the optimum is -42.3): a
    # solver's "optimal" below the start it was given is not believed, whatever the solver.
    import json
    from pathlib import Path

    import pyomo.environ as pyo

    raw = json.loads((Path(__file__).resolve().parents[1] / "examples" / "round-16x4.json").read_text())
    real_solve = type(pyo.SolverFactory("cbc")).solve

    def worse_point_claimed_optimal(self, model, **kwargs):  # what CBC did: a poor point, "optimal"
        res = real_solve(self, model, **kwargs)
        model.solutions.load_from(res)
        for v in model.columns:
            v.set_value(0, skip_validation=True)
        model.solutions.store_to(res)
        return res

    monkeypatch.setattr(type(pyo.SolverFactory("cbc")), "solve", worse_point_claimed_optimal)
    result = solve_round(raw, solver="cbc")
    # unproven, and below the greedy: the greedy is the answer, flagged, the solver's word quoted
    assert result.status == "fallback" and "not believed" in result.message and result.verified
    assert result.objective > -85.5
