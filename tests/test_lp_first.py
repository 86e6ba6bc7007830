"""LP-first solving (solvers.highs_direct) reaches the full MIP's optimum, and its bound holds;
every answer that is not proven optimal carries a bound, the LP relaxation's where the solver
has none (api._bounded), unless not even that was solved in time."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import scipy.sparse as sp
from brute_force import best_objective, feasible_choices
from conftest import tiny_round

import schedlab
from schedlab.api import solve_round
from schedlab.bench import random_round
from schedlab.clusters import ClusterSpec, make_cluster, parse_pools
from schedlab.errors import InputError
from schedlab.formulations import FORMULATIONS
from schedlab.formulations.goodput import (
    build_arrays,
    decoupled_choice,
    max_min_upper,
    max_min_weight,
    min_job_speedup,
    structure,
)
from schedlab.formulations.options import enumerate_options
from schedlab.io import json_text, round_result_to_dict
from schedlab.milp import FAILED, TIME_LIMIT, MilpArrays, SolveOutcome
from schedlab.solvers import highs_direct
from schedlab.solvers.highs_direct import lp_bound, solve_highs
from schedlab.solvers.outcome import best_of, decoupled_optimum, start_outcome
from schedlab.state import Settings
from schedlab.verify import verify

RESULT_SCHEMA = json.loads((Path(schedlab.__file__).parent / "schemas" / "round_result.schema.json").read_text())


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
    assert paths["decoupled: each job's best option"] > 0


def test_the_decoupled_optimum_is_the_full_mips_wherever_it_answers():
    """Random models of one-of rows and a capacity row, some columns fixed at 0 or at 1: where
    decoupled_optimum answers, its point is the full MIP's optimum, bounded by itself; it
    answers where the capacity is loose and declines where it binds."""
    rng = np.random.default_rng(5)
    answered = declined = 0
    for _ in range(300):
        jobs, per = int(rng.integers(1, 6)), int(rng.integers(1, 5))
        n = jobs * per
        job = np.repeat(np.arange(jobs), per)
        weight = rng.integers(1, 4, size=n).astype(float)
        A = sp.vstack([sp.csr_matrix((np.ones(n), (job, np.arange(n))), shape=(jobs, n)), weight[None, :]]).tocsr()
        col_lo, col_hi = np.zeros(n), np.ones(n)
        pinned = np.flatnonzero(rng.random(jobs) < 0.15) * per  # a job's first column fixed at 1
        col_lo[pinned] = 1.0
        col_hi[(rng.random(n) < 0.2) & (col_lo == 0)] = 0.0  # fixed at 0
        capacity = float(rng.integers(1, 3 * jobs + 1)) + weight[pinned].sum()
        model = MilpArrays(c=rng.normal(size=n), offset=0.5, A=A, row_lo=np.full(jobs + 1, -np.inf),
                           row_hi=np.r_[np.ones(jobs), capacity], col_lo=col_lo, col_hi=col_hi,
                           integer=np.ones(n, dtype=bool), one_rows=np.arange(jobs))
        full = solve_highs(replace(model, one_rows=None), 30.0, 0.0, lp_first=False)
        got = decoupled_optimum(model)
        if got is None:
            declined += 1
            continue
        answered += 1
        assert full.status == "optimal"
        assert got.status == "optimal" and got.bound == got.objective
        assert got.objective == pytest.approx(full.objective, abs=1e-9)
        assert model.max_violation(got.values) == 0.0 and (got.values[pinned] == 1.0).all()
    assert answered >= 50 and declined >= 50


def test_a_goodput_model_decides_its_decoupled_optimum_without_its_arrays():
    """GoodputModel.decoupled answers exactly where each job's best option (a pinned job its stay,
    the first of equals) is the optimum: its answer is the full MIP's optimum, and the point
    decoupled_optimum finds on the arrays wherever that check answers; where it declines, the
    full MIP's optimum is below that point's bound (so the arrays' check, skipped then, could
    not answer). Nodes of several stayers and max-min rounds among them, and rounds the
    arrays' check passes over (a stayer of a node of several moves: w at its start is too low)."""
    rng = np.random.default_rng(8)
    answered = declined = several = max_min = beyond = 0
    for _ in range(500):
        ri = tiny_round(rng, p=float(rng.choice([1.0, 0.0, -1.0, -math.inf])), max_jobs=5)
        jobs = tuple(replace(j, pinned=True) if j.running and j.min_gpus <= len(j.current_gpus) <= j.max_gpus
                     and rng.random() < 0.2 else j for j in ri.jobs)
        model = FORMULATIONS["goodput"](replace(ri, jobs=jobs))
        try:
            arrays = model.arrays()
        except InputError:  # a pinned job that cannot run where it is
            continue
        on_arrays, got = decoupled_optimum(arrays), model.decoupled()
        full = solve_highs(arrays, 30.0, 0.0, lp_first=False)
        assert full.status == "optimal"
        choice = decoupled_choice(model.opts)
        bound = model.objective(choice.astype(float))  # of each job's best option, and under max-min of t at its bound
        if ri.settings.max_min:
            bound += max_min_weight(model.opts) * (max_min_upper(model.opts) - min_job_speedup(model.opts, choice))
        if got is None:
            declined += 1
            assert on_arrays is None
            assert not model.opts.num_options or full.objective < bound - 1e-9 * max(1.0, abs(bound))
            continue
        answered += 1
        several += bool(structure(model.opts).multi_stayer)
        max_min += ri.settings.max_min
        beyond += on_arrays is None
        assert got.status == "optimal" and got.objective == got.bound == pytest.approx(full.objective, abs=1e-9)
        assert on_arrays is None or np.array_equal(got.values, on_arrays.values[:model.opts.num_options])
        verify(ri, model.decode(got.values))
    assert answered >= 100 and declined >= 100 and several >= 10 and max_min >= 10 and beyond >= 3


def test_a_decoupled_round_is_answered_before_its_arrays_by_lp_first_solvers_only():
    """A few jobs on a large cluster: the LP-first solvers answer from the options (no arrays
    built), cpsat solves the arrays; the same allocations either way."""
    ri = random_round(np.random.default_rng(2), 256, 4, running_fraction=0.0, settings=Settings())
    fast, by_cpsat = solve_round(ri), solve_round(ri, solver="cpsat")
    assert fast.status == by_cpsat.status == "optimal"
    assert fast.message == "decoupled: each job's best option, and they pack" and fast.build_s == fast.options_s
    assert not by_cpsat.message.startswith("decoupled") and by_cpsat.build_s > by_cpsat.options_s
    assert fast.allocations == by_cpsat.allocations


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


@cache
def _racked_cluster() -> schedlab.Cluster:
    """16 nodes of 4 GPUs in 4 racks, PAL's measured variability (its k-means takes seconds: once)."""
    return make_cluster(ClusterSpec(16, 4, racks=4, variability="measured", seed=0))[0]


def _joint_round(seed: int) -> schedlab.RoundInput:
    """40 random jobs on the racked cluster, under the joint formulation."""
    return replace(random_round(np.random.default_rng(seed), 64, 40, settings=Settings(formulation="joint")),
                   cluster=_racked_cluster())


@pytest.mark.parametrize("seed, status", [(0, "fallback"), (2, "time_limit")])
def test_a_joint_round_stopped_early_is_bounded_by_its_lp_relaxation(seed, status):
    """HiGHS stopped at once (its own time_limit 0) has only the warm start and no bound: the
    answer's bound is the LP relaxation of the round's model, solved in the round's time."""
    ri = _joint_round(seed)
    res = solve_round(ri, solver="highs", solver_options={"time_limit": 0.0})
    assert res.status == status and not res.bound_timed_out  # the greedy answered, or the warm start
    assert res.bound == pytest.approx(lp_bound(FORMULATIONS["joint"](ri).arrays()), rel=1e-9)
    assert res.bound >= res.objective and res.gap == pytest.approx((res.bound - res.objective) / abs(res.objective))


def test_the_bound_without_a_vertex_is_the_relaxations_optimum(monkeypatch):
    """The interior point method without crossover (what the scale table's loss uses on the
    largest rounds) gives the simplex's optimum, to its tolerance."""
    arrays = FORMULATIONS["joint"](_joint_round(1)).arrays()
    simplex = lp_bound(arrays)
    monkeypatch.setattr(highs_direct, "IPM_MIN_ROWS", 0)  # this small model to the interior point method too
    assert lp_bound(arrays, vertex=False) == pytest.approx(simplex, rel=1e-7)
    assert lp_bound(arrays) == pytest.approx(simplex, rel=1e-9)


@pytest.mark.parametrize("gpus, jobs, multi_node", [(64, 8, True), (256, 100, False)])
def test_the_relaxation_by_column_generation_is_the_whole_relaxation(gpus, jobs, multi_node):
    """A joint round's relaxation without its multi-node options, those priced in while any
    pays, has the whole relaxation's optimum, a point of the whole model, and reduced costs that
    certify it (none would raise the objective from where the point leaves its column). Seed 3:
    at 64 GPUs / 8 jobs the optimum takes multi-node options (priced in), at 256 / 100 none."""
    cluster = make_cluster(ClusterSpec(gpus // 4, 4, racks=4, uplink_gbps=50.0, variability="measured", seed=3))[0]
    rng = np.random.default_rng(3)
    for _ in range(3):
        ri = replace(random_round(rng, gpus, jobs, settings=Settings(formulation="joint")), cluster=cluster)
        model = FORMULATIONS["joint"](ri)
        arrays = model.arrays()
        whole, _ = highs_direct._relax(replace(arrays, defer=None), 30.0, 0)
        priced, reduced_cost = highs_direct._priced_relax(arrays, 30.0, 0)
        assert priced.status == "optimal" and arrays.defer.any()
        assert priced.objective == pytest.approx(whole.objective, rel=1e-9)
        assert arrays.max_violation(priced.values) <= 1e-7
        tol = 1e-6 * np.maximum(1.0, np.abs(arrays.c))
        x = priced.values
        raises = ((x < arrays.col_hi) & (reduced_cost > tol)) | ((x > arrays.col_lo) & (reduced_cost < -tol))
        assert not raises.any()
        assert (priced.values[arrays.defer] > 1e-9).any() == multi_node


def test_no_bound_is_invented_when_not_even_the_lp_relaxation_fits_the_limit():
    res = solve_round(_joint_round(0), time_limit_s=1e-6)
    assert res.status == "fallback" and res.verified and res.bound_timed_out and math.isnan(res.bound)
    out = json.loads(json_text(round_result_to_dict(res)))
    jsonschema.validate(out, RESULT_SCHEMA)
    assert out["bound"] is None and out["gap"] is None and out["bound_timed_out"] is True


def test_a_relaxation_bound_survives_searches_that_found_no_point():
    """LP first's relaxation bounds the model even where no neighbourhood found a point: a MIP
    or a race that stops without a bound of its own, or the warm start answered at the limit,
    keeps it."""
    model = MilpArrays(np.array([1.0, 1.0]), 0.0, sp.csr_matrix(np.ones((1, 2))), np.array([-np.inf]), np.array([1.0]),
                       np.zeros(2), np.ones(2), np.ones(2, dtype=bool), start=np.array([1.0, 0.0]))
    relaxed = SolveOutcome(FAILED, None, math.nan, 1.0, 0.01, "LP first: no neighbourhood point")
    stopped = SolveOutcome(TIME_LIMIT, np.array([1.0, 0.0]), 1.0, math.inf, 0.02, "MIP: time limit reached")
    assert best_of((stopped, relaxed), 1e-4).bound == 1.0
    assert start_outcome(model, relaxed, 0.03).bound == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reduced_cost_fixing_proves_what_the_neighbourhoods_of_jobs_do_not(seed):
    """Three GPU types, 256 GPUs / 200 jobs: the fractional jobs' neighbourhood leaves the round
    unproven; the MIP over the columns reduced-cost fixing leaves free proves it, at the full
    MIP's optimum, and the bound it reports holds (no point of the full MIP is above it)."""
    pools = parse_pools("v100:22x4,p100:21x4,k80:21x4")
    round_input = random_round(np.random.default_rng(seed), 0, 200, pools=pools, settings=Settings(solver="highs"))
    model = FORMULATIONS["goodput"](round_input).arrays()
    found = highs_direct.lp_first_search(model, 60.0, 1e-4)
    full = solve_highs(model, 120.0, 1e-7, lp_first=False)
    assert found.message.startswith("reduced-cost fixing"), found.message
    assert found.status == "optimal"
    assert found.objective == pytest.approx(full.objective, rel=1e-4)
    assert found.bound >= full.objective - 1e-9
    assert found.bound < highs_direct.lp_bound(model)  # tighter than the relaxation's
