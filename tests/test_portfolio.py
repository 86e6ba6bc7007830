"""CP-SAT's optimum is the model's optimum, and the portfolio (HiGHS, then CP-SAT) reaches it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from schedlab.bench import random_round
from schedlab.formulations.goodput import build_arrays
from schedlab.formulations.options import enumerate_options
from schedlab.milp import MilpArrays, SolveOutcome
from schedlab.solvers import highs_direct, portfolio
from schedlab.solvers.cpsat import solve_cpsat
from schedlab.solvers.highs_direct import solve_highs
from schedlab.solvers.outcome import StopSignal
from schedlab.state import Settings

DATA = Path(__file__).parent / "data"


def _loose_lp_round() -> MilpArrays:
    """A round of a 2,560-job Philly replay on 1,024 GPUs (72 jobs, 1,051 columns): its LP bound
    is 2e-4 above the optimum, and the p-mean objective's constant (sum_j U0_j = -62,274) is
    ~450x the objective (-138.4), so a gap taken of c @ x alone allows a point 1e-2 short."""
    f = np.load(DATA / "loose_lp_round.npz")
    A = sp.csr_matrix((f["A_data"], f["A_indices"], f["A_indptr"]), shape=tuple(f["A_shape"]))
    return MilpArrays(f["c"], float(f["offset"]), A, f["row_lo"], f["row_hi"], f["col_lo"], f["col_hi"],
                      f["integer"], f["start"], f["choice"])


def _few_jobs_many_gpus(seed: int) -> MilpArrays:
    ri = random_round(np.random.default_rng(seed), 256, 24, settings=Settings(p=-1.0))
    return build_arrays(enumerate_options(ri))


def test_cpsat_optimum_is_within_the_gap_of_the_whole_objective():
    arrays = _loose_lp_round()
    exact = solve_highs(arrays, 60.0, 0.0, lp_first=False)
    assert exact.status == "optimal"
    cp = solve_cpsat(arrays, 60.0, 1e-4)
    assert cp.status == "optimal"
    scale = abs(exact.objective)
    assert exact.objective - 1e-4 * scale <= cp.objective <= exact.objective + 1e-9 * scale
    assert cp.bound >= exact.objective - 1e-9 * scale


@pytest.fixture
def race_at_once(monkeypatch):
    """The race from its start, even on small models (no head start for HiGHS alone)."""
    monkeypatch.setattr(portfolio, "HEAD_START_COLS", 0)


@pytest.mark.parametrize("seed", range(3))
def test_portfolio_reaches_the_optimum_whichever_solver_wins(seed, race_at_once):
    arrays = _few_jobs_many_gpus(seed)
    exact = solve_highs(arrays, 60.0, 0.0, lp_first=False)
    out = portfolio.solve_portfolio(arrays, 60.0, 1e-4, lp_first=False)  # straight to the race
    assert "highs MIP: " in out.message and "cpsat: " in out.message
    assert out.status == "optimal"
    scale = abs(exact.objective)
    assert exact.objective - 1e-4 * scale <= out.objective <= exact.objective + 1e-9 * scale
    assert out.bound >= exact.objective - 1e-9 * scale
    assert arrays.max_violation(out.values) <= 1e-9


def test_the_first_proof_stops_the_other_search():
    """On this round CP-SAT proves the optimum in ~0.1 s, HiGHS's MIP from the model's start needs
    ~2 s: it is cut short."""
    arrays = _loose_lp_round()
    out = portfolio.solve_portfolio(arrays, 60.0, 1e-4, lp_first=False)
    assert out.status == "optimal" and "cpsat: OPTIMAL" in out.message
    assert "highs MIP: Interrupted by user" in out.message, out.message


def test_a_race_won_before_cpsat_searches_does_not_wait_for_its_search():
    """CpSolver.stop_search does nothing before a search begins: CP-SAT, stopped while it writes
    its model (this round's takes it ~0.1 s to prove), returns at once without a point."""
    stop = StopSignal()
    stop.stop()
    out = solve_cpsat(_loose_lp_round(), 60.0, 1e-4, stop=stop)
    assert (out.status, out.values, out.message) == ("failed", None, "stopped before its search began")


def test_the_race_starts_highs_from_the_better_of_the_lp_first_point_and_the_models_start(monkeypatch):
    # without reduced-cost fixing (which proves this round) the LP-first search leaves it open
    monkeypatch.setattr(highs_direct, "REDUCED_COST_MAX_SHARE", 0.0)
    arrays = _loose_lp_round()
    first = portfolio.lp_first_search(arrays, 60.0, 1e-4)
    assert first.status != "optimal" and first.objective > arrays.objective(arrays.start)
    assert portfolio._from_best(arrays, [first]).start is first.values
    worse = SolveOutcome("time_limit", np.zeros(arrays.num_cols), arrays.objective(np.zeros(arrays.num_cols)), math.nan, 0.0)
    assert worse.objective < arrays.objective(arrays.start)
    assert portfolio._from_best(arrays, [worse]).start is arrays.start


def test_portfolio_keeps_the_highs_point_when_cpsat_finds_nothing(monkeypatch, race_at_once):
    arrays = _few_jobs_many_gpus(0)
    monkeypatch.setattr(portfolio, "solve_cpsat", lambda *a, **k: SolveOutcome("failed", None, math.nan, math.nan, 0.0))
    out = portfolio.solve_portfolio(arrays, 0.05, 1e-4, lp_first=False)
    assert out.values is not None and out.status in ("optimal", "time_limit")
    assert arrays.max_violation(out.values) <= 1e-9


def test_a_small_model_proven_by_highs_alone_starts_no_race(monkeypatch):
    arrays = _few_jobs_many_gpus(0)
    assert arrays.num_cols < portfolio.HEAD_START_COLS
    monkeypatch.setattr(portfolio, "solve_cpsat", lambda *a, **k: pytest.fail("CP-SAT started"))
    out = portfolio.solve_portfolio(arrays, 60.0, 1e-4, lp_first=False)
    exact = solve_highs(arrays, 60.0, 0.0, lp_first=False)
    assert out.status == "optimal" and out.message == "highs MIP alone: Optimal"
    assert out.objective >= exact.objective - 1e-4 * abs(exact.objective)


def test_a_small_model_unproven_in_the_head_start_goes_to_the_race(monkeypatch):
    arrays = _few_jobs_many_gpus(1)
    monkeypatch.setattr(portfolio, "HEAD_START_S", 1e-9)
    out = portfolio.solve_portfolio(arrays, 60.0, 1e-4, lp_first=False)
    assert "highs MIP alone: " in out.message and "cpsat: " in out.message
    assert out.status == "optimal"


def test_cpsat_takes_any_seed_the_schema_allows():
    arrays = _few_jobs_many_gpus(1)
    assert solve_cpsat(arrays, 30.0, 1e-4, seed=2**40).status == "optimal"
