"""The fast path: MilpArrays straight into highspy, no modelling layer in between.

LP first. With one choice row per job and a handful of coupling rows, the LP relaxation's
vertex has few fractional jobs (at 4,096 GPUs / 2,000 jobs often none), and HiGHS solves it in a
fraction of the time its MIP search takes to prove the same point. So (`lp_first`, the default):
  0. where every job's best option fits beside the others', that point is optimal without a
     relaxation (solvers.outcome.decoupled_optimum);
  1. solve the relaxation; its objective bounds the MIP's;
  2. if every integer column is integral, that point is optimal;
  3. otherwise, for a model whose columns name their jobs (`choice`), solve the MIP over a
     neighbourhood only: the fractional jobs, the auxiliary
     columns (slots, t) and the `size` jobs whose cheapest alternative option costs the LP
     least (its reduced cost), every other job fixed at its LP choice, a search of
     RESTRICTED_MAX_NODES branch-and-bound nodes at most. A point within
     `mip_gap` of the LP bound is optimal at that gap (the bound is the whole model's);
     otherwise the neighbourhood grows (NEIGHBOURHOODS, while it frees at most half the
     model), then the units beside the fractional columns (in the rows they lie in) and, past
     the last,
  4. the full MIP runs with the time left (the neighbourhood's point is the answer if better).
Where reduced-cost fixing pays (below), the steps run in another order: the first
neighbourhood, the units beside it, reduced-cost fixing, the larger neighbourhoods. Three GPU
types at 2,048 GPUs / 1,000 jobs, 6 rounds: the units beside the fractional columns (800-1,400
columns free) proved 3 of 6 rounds in 12-58 ms, where reduced-cost fixing took 53-206 ms;
on one type the 32-job neighbourhood is the faster (5-15 ms against 4-55 ms) and runs first.
Reduced-cost fixing (exact): a point that
moves an integer column off the bound where the LP leaves it loses at least the column's reduced
cost |d_j| against the LP bound B (LP duality: z(x) <= B + sum_j d_j (x_j - x*_j)). So the MIP
over the columns with |d_j| <= s holds every point within s of B; with s half the gap
(REDUCED_COST_GAP_SHARE: rounds' optima lie 1e-5-5e-5 below B) a point it finds within the gap
is optimal, and where it is solved, every point outside it is below B - s. Else the MIP over
the columns with |d_j| <= B - f (f: the best point's value) holds every better point: solved,
it proves its answer optimal against its own bound. Three types of GPU at 2,048 GPUs / 1,000
jobs: about 2,200 of 15,000 columns stay free in the first, solved in 50-120 ms (the whole gap:
2,800, 70-150 ms), where the neighbourhoods of jobs took 0.2-0.8 s and a round whose optimum
lies 2.4e-4 below the LP bound needed the full MIP (12.6 s). It runs in large models where it
frees few columns (REDUCED_COST_MIN_COLS, REDUCED_COST_MAX_SHARE).
Rounding the fractional jobs down alone lands 1-3e-4 below the LP bound at 2,048 GPUs / 1,000
jobs, where the integer optimum is within 1e-5-5e-5 of it; freeing the 32 jobs of smallest
regret besides finds a point within 5e-5 in ~20 ms, where HiGHS's full MIP takes 0.3-2.5 s.
`lp_first=False` runs the full MIP alone (the reference the tests compare against).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cache
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp

from schedlab.errors import InputError
from schedlab.milp import FAILED, OPTIMAL, TIME_LIMIT, MilpArrays, SolveOutcome
from schedlab.solvers.log import solver_log_on
from schedlab.solvers.outcome import StopSignal, best_of, decoupled_optimum, start_outcome, tightest_bound

__all__ = ["HIGHS_OPTIONS_URL", "IPM_MIN_ROWS", "NEIGHBOURHOODS", "NEIGHBOURHOOD_MAX_SHARE", "check_options", "lp_bound",
           "lp_first_search", "set_options", "solve_highs"]

_ROWWISE, _MAXIMIZE = 2, -1
Options = tuple[tuple[str, Any], ...]  # settings.solver_options: (name, value) pairs
HIGHS_OPTIONS_URL = "https://ergo-code.github.io/HiGHS/stable/options/definitions/"


@contextmanager
def _stdout_silenced():
    """HiGHS 1.12.0 (pinned for ortools) printf()s a stray debug line to the process's stdout
    during some MIP solves, whatever output_flag says (ERGO-Code/HiGHS#2783, fixed upstream
    later); it would corrupt JSON written to stdout, so fd 1 points at /dev/null meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2 if solver_log_on() else _devnull_fd(), 1)  # a log asked for goes to stderr
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@cache
def _devnull_fd() -> int:
    """/dev/null, opened once: opening it per solve cost ~1 ms (2 s of a 1,050-round replay)."""
    return os.open(os.devnull, os.O_WRONLY)


_INTEGRAL_TOL = 1e-9
NEIGHBOURHOODS = (0, 32, 128)  # units (jobs, ...) freed besides the fractional ones, in turn
# A neighbourhood freeing more of the integer columns than this is not tried: in a 198-job round
# of the Philly trace on 2,048 GPUs the 128-job one (64 % of the columns, no start) took 3.3 s
# where the full MIP from the model's start took 0.11 s.
NEIGHBOURHOOD_MAX_SHARE = 0.5
# Reduced-cost fixing's first MIP runs where it leaves at most this share of the columns free
# (its second, NEIGHBOURHOOD_MAX_SHARE). Three GPU
# types at 2,048 GPUs / 1,000 jobs: 18 %, solved in 0.1-0.2 s where the neighbourhoods of jobs
# took up to 0.8 s; one type: 38 %, 0.25-0.4 s where the 32-job neighbourhood proves in 20 ms;
# joint at 2,048 GPUs: 35 %, 2-3 s where the last neighbourhood proves in 50 ms.
REDUCED_COST_MAX_SHARE = 0.25
# The first frees the columns a point within this share of the gap may move: on the rounds above
# 0.5 found the same points as the whole gap, in 20-40 % less time; 0.25 missed 3 of 5.
REDUCED_COST_GAP_SHARE = 0.5
# ... and only in models of at least this many columns: below it the neighbourhoods of jobs and
# the full MIP prove a round in milliseconds (a 64-GPU Pollux round: ~500 columns), and the
# reduced-cost MIPs would only pick another point within the gap, moving replays that match
# Pollux's artifact. Above it the full MIP is slow: the 40 rounds of a day of the Philly trace
# on 2,048 GPUs (~1,400 columns) whose neighbourhoods could not prove them took 206 ms
# (median) and 50 s in all with the full MIP after them, 34 ms and 13 s with reduced-cost
# fixing first.
REDUCED_COST_MIN_COLS = 1_000
ADJACENT_PER_ROW = 16  # the last neighbourhood: units freed per row a fractional column lies in
# A restricted MIP (its fixed columns already moved out, _run_restricted) runs HiGHS's presolve
# only below this many free columns: above it, presolve and the restarts it brings cost more
# than they save. 46 restricted MIPs of 20 three-type rounds (2,048 GPUs / 1,000 jobs), best of
# two: with presolve 1,806 ms, without 1,368 ms; presolve wins below ~1,000 free columns
# (8 against 17 ms at 719), loses above (352 against 208 ms at 1,314; 113 against 103 at 2,170).
RESTRICTED_PRESOLVE_MAX_COLS = 1_200
# A restricted MIP is a search near the LP point, not a proof of the round: it stops after this
# many branch-and-bound nodes with its best point. Those of the benchmarks and the Pollux
# artifact's replays took 13 nodes at most; in the largest rounds of the Philly trace (340-430
# jobs on 512 nodes) the 128-job neighbourhood took 4,500-8,300 nodes and 7-10 s, where the
# units beside the fractional columns and the full MIP after it proved the round in 0.03-1 s
# (9 such rounds of day 29: 28.7 -> 3.8 s; that day's replay 27.0 -> 15.8 s, medians of 3 paired runs).
RESTRICTED_MAX_NODES = 100


def solve_highs(model: MilpArrays, time_limit_s: float, mip_gap: float, seed: int = 0,
                lp_first: bool = True, stop: StopSignal | None = None, solver_options: Options = ()) -> SolveOutcome:
    """Solve a MILP given as arrays with HiGHS: LP first (module docstring), then the full MIP.

    HiGHS runs on one thread, without the MIP heuristics that cost rounds more than they found,
    warm-started from the model's start. An empty model is optimal at its offset.

    Parameters
    ----------
    model : MilpArrays
        The model to maximize.
    time_limit_s : float
        Wall-clock seconds for every solve of this call together.
    mip_gap : float
        Relative gap at which a point is optimal (HiGHS's mip_rel_gap, and the LP-first test).
    seed : int, default 0
        HiGHS's random seed.
    lp_first : bool, default True
        Steps 1-3 of the module docstring before the full MIP; False runs the full MIP alone.
    stop : StopSignal, optional
        Interrupts the full MIP (a race against another solver: solvers.portfolio).
    solver_options : tuple of (str, value) pairs
        HiGHS options set on every solve after schedlab's.

    Returns
    -------
    SolveOutcome
        The best point found (the full MIP's or a neighbourhood's), its status against the
        tightest bound; out of time without a point, the model's start if it has one.

    Raises
    ------
    InputError
        An option HiGHS does not have or does not take that value for.
    """
    t0 = time.perf_counter()
    if not model.num_cols:  # nothing to decide (no job has an option): optimal at the offset
        return SolveOutcome(OPTIMAL, np.zeros(0), model.offset, model.offset, 0.0, "empty model")
    left_s = lambda: time_limit_s - (time.perf_counter() - t0)  # noqa: E731
    found = None
    if lp_first and model.integer.any():
        found = lp_first_search(model, time_limit_s, mip_gap, seed, solver_options)
        if found.status == OPTIMAL or found.values is not None and left_s() <= 0:
            return replace(found, solve_s=time.perf_counter() - t0)
        if left_s() <= 0:
            return start_outcome(model, found, time.perf_counter() - t0)
    # Warm-started from the model's own start, not the neighbourhood's better point: from that
    # point HiGHS 1.12 searched 10-20 s where it proves the optimum in ~0.1 s from the start
    # (2,048 GPUs / 1,024 jobs); the better point still wins if the MIP runs out of time.
    outcome = _run(model, model.integer, max(left_s(), 1e-3), mip_gap, seed, stop=stop, options=solver_options)
    if found is not None and found.values is not None and (outcome.values is None or found.objective > outcome.objective):
        outcome = best_of((outcome, found), mip_gap)  # the MIP's proof covers the better neighbourhood point
    if found is not None:  # the relaxation's bound holds where the MIP stopped without one (or a weaker one)
        outcome = replace(outcome, bound=tightest_bound((outcome, found)))
    return replace(outcome, solve_s=time.perf_counter() - t0)


def lp_first_search(model: MilpArrays, time_limit_s: float, mip_gap: float, seed: int = 0,
                    options: Options = ()) -> SolveOutcome:
    """Steps 0-3: the decoupled optimum, else the relaxation, then the neighbourhoods around it. OPTIMAL when proven (within
    mip_gap of the LP bound), TIME_LIMIT with the best neighbourhood point otherwise, FAILED
    (values None) when none was found or the relaxation did not solve in time."""
    if (decoupled := decoupled_optimum(model)) is not None:
        return decoupled
    t0 = time.perf_counter()
    left_s = lambda: time_limit_s - (time.perf_counter() - t0)  # noqa: E731
    relaxed, reduced_cost = _priced_relax(model, time_limit_s, seed, options)
    if relaxed.status != OPTIMAL:
        return SolveOutcome(FAILED, None, float("nan"), float("nan"), time.perf_counter() - t0,
                            f"LP relaxation: {relaxed.message}")
    found = _around_relaxation(model, relaxed, reduced_cost, left_s, mip_gap, seed, options)
    return replace(found, solve_s=time.perf_counter() - t0)


def _around_relaxation(model: MilpArrays, relaxed: SolveOutcome, reduced_cost: np.ndarray, left_s,
                       mip_gap: float, seed: int, options: Options = ()) -> SolveOutcome:
    """Steps 2 and 3. The bound is the relaxation's; status OPTIMAL only within mip_gap of it,
    else TIME_LIMIT with the best point found (None if no neighbourhood had one)."""
    bound, x = relaxed.objective, relaxed.values
    assert x is not None, "an optimal relaxation has its point"
    frac = model.integer & (np.abs(x - np.round(x)) > _INTEGRAL_TOL)
    if not frac.any():
        return replace(relaxed, values=np.where(model.integer, np.round(x), x), bound=bound,
                       message="LP relaxation integral")
    best = replace(relaxed, status=FAILED, values=None)
    choice = model.choice
    if choice is None:  # no jobs to free or fix: the full MIP decides
        return best
    regret_order = _by_regret(choice, model.col_lo, x, reduced_cost)
    # None: the units the fractional columns share a row with, where the LP uses them
    steps = ((0, None, _REDUCED_COST) + NEIGHBOURHOODS[1:] if _reduced_cost_pays(model, x, reduced_cost, bound, mip_gap)
             else NEIGHBOURHOODS + (None,))
    for step in steps:
        if step is _REDUCED_COST:
            best = _reduced_cost_search(model, relaxed, reduced_cost, best, left_s, mip_gap, seed, options)
            if best.status == OPTIMAL or left_s() <= 0 or best.message.startswith(_EXHAUSTED):
                break
            continue
        free = _neighbourhood(choice, frac, regret_order[:step] if step is not None else _adjacent(model, frac, x, regret_order))
        if (free & model.integer).sum() > NEIGHBOURHOOD_MAX_SHARE * model.integer.sum():
            if step is None:
                continue  # the steps after it may free fewer
            break  # as large as the model, and the later ones larger: the full MIP is the faster search
        fixed = model.integer & ~free
        restricted = replace(model, col_lo=np.where(fixed, np.round(x), model.col_lo),
                             col_hi=np.where(fixed, np.round(x), model.col_hi), start=None)
        found = _run_restricted(restricted, max(left_s(), 1e-3), mip_gap, seed, options)
        if found.values is not None and (best.values is None or found.objective > best.objective):
            gap = (bound - found.objective) / max(abs(found.objective), 1e-9)
            beside = f"{step} more" if step is not None else "the units beside them"
            message = f"LP first: MIP over the fractional jobs and {beside}, {gap:.1e} from the LP bound"
            best = replace(found, status=OPTIMAL if gap <= mip_gap else TIME_LIMIT, bound=bound, message=message)
            if best.status == OPTIMAL or left_s() <= 0:
                break
    return best


_REDUCED_COST = "reduced cost"  # the step of _around_relaxation that runs _reduced_cost_search


def _reduced_cost_pays(model: MilpArrays, x: np.ndarray, reduced_cost: np.ndarray, bound: float, mip_gap: float) -> bool:
    """Whether reduced-cost fixing runs (module docstring): a model of REDUCED_COST_MIN_COLS
    columns or more whose first reduced-cost MIP frees at most REDUCED_COST_MAX_SHARE of them."""
    if model.num_cols < REDUCED_COST_MIN_COLS:
        return False
    first = _fixed_by_reduced_cost(model, x, reduced_cost, REDUCED_COST_GAP_SHARE * mip_gap * abs(bound))
    return (first.col_lo < first.col_hi).sum() <= REDUCED_COST_MAX_SHARE * model.num_cols


_EXHAUSTED = "reduced-cost fixing"


def _reduced_cost_search(model: MilpArrays, relaxed: SolveOutcome, reduced_cost: np.ndarray, best: SolveOutcome,
                         left_s, mip_gap: float, seed: int, options: Options) -> SolveOutcome:
    """The two reduced-cost MIPs of the module docstring, from `best` (TIME_LIMIT, or FAILED
    without a point). Returns the best point with status OPTIMAL where proven (its bound the
    proof's), else `best` or a better point; a message starting with _EXHAUSTED says the search
    settled what it could (the neighbourhoods of jobs cannot prove more)."""
    bound, x = relaxed.objective, relaxed.values
    assert x is not None, "an optimal relaxation has its point"
    for exact in (False, True):
        if exact and best.values is None:
            return best  # no point to beat: the full MIP searches
        slack = bound - best.objective if exact else REDUCED_COST_GAP_SHARE * mip_gap * abs(bound)
        restricted = _fixed_by_reduced_cost(model, x, reduced_cost, slack)
        # the first runs only where it is small (_reduced_cost_pays); the second (a round the gap
        # cannot prove) where it beats the full MIP
        if exact and (restricted.col_lo < restricted.col_hi).sum() > NEIGHBOURHOOD_MAX_SHARE * model.num_cols:
            return best
        start = None if best.values is None else np.where(model.integer, np.round(best.values), best.values)
        if start is not None:  # free the best point's columns: HiGHS starts from it, and a larger model still proves
            restricted = replace(restricted, col_lo=np.minimum(restricted.col_lo, start),
                                 col_hi=np.maximum(restricted.col_hi, start))
        found = _run_restricted(replace(restricted, start=start), max(left_s(), 1e-3), mip_gap, seed, options)
        solved = found.status == OPTIMAL  # within mip_gap of the restricted model's own bound
        if found.values is not None and (best.values is None or found.objective > best.objective):
            best = replace(found, status=TIME_LIMIT, bound=bound)
        if best.values is None:
            return best
        # every point outside the restricted model is worth at most bound - slack
        proof = min(bound, max(found.bound, bound - slack)) if solved else bound
        gap = (proof - best.objective) / max(abs(best.objective), 1e-9)
        kind = "a better point" if exact else "a point within the gap"
        message = (f"{_EXHAUSTED}: MIP over the columns {kind} can move "
                   f"({int((restricted.col_lo < restricted.col_hi).sum())} of {model.num_cols}), {gap:.1e} from its bound")
        best = replace(best, status=OPTIMAL if gap <= mip_gap else TIME_LIMIT, bound=proof if solved else bound,
                       message=message)
        if best.status == OPTIMAL or not solved or left_s() <= 0:
            return best
    return best


def _fixed_by_reduced_cost(model: MilpArrays, x: np.ndarray, reduced_cost: np.ndarray, slack: float) -> MilpArrays:
    """The model with every integer column that the LP point `x` leaves at a bound fixed there
    where moving it costs the LP bound more than `slack` (a maximization: the reduced cost of a
    column at its lower bound is <= 0, at its upper bound >= 0)."""
    margin = slack * (1 + 1e-9) + 1e-9  # fix only what is clearly beyond the slack
    at_lo = model.integer & (x <= model.col_lo + _INTEGRAL_TOL) & (-reduced_cost > margin)
    at_hi = model.integer & (x >= model.col_hi - _INTEGRAL_TOL) & (reduced_cost > margin) & ~at_lo
    return replace(model, col_lo=np.where(at_hi, model.col_hi, model.col_lo),
                   col_hi=np.where(at_lo, model.col_lo, model.col_hi))


def _by_regret(choice: np.ndarray, col_lo: np.ndarray, x: np.ndarray, reduced_cost: np.ndarray) -> np.ndarray:
    """Jobs by how little the LP loses if they switch options: the smallest reduced cost of an
    option they leave at 0 (a maximization: reduced costs there are <= 0). `choice`: each
    column's job (MilpArrays.choice)."""
    unused = (x <= col_lo + _INTEGRAL_TOL) & (choice >= 0)
    regret = np.full(int(choice.max(initial=-1)) + 1, np.inf)
    np.minimum.at(regret, choice[unused], -reduced_cost[unused])
    return np.argsort(regret, kind="stable")


def _adjacent(model: MilpArrays, frac: np.ndarray, x: np.ndarray, regret_order: np.ndarray) -> np.ndarray:
    """The units the fractional columns are tied to: in each row where one lies, the units of
    the columns the LP point `x` uses there (e.g. a fractional slot's pool and the jobs it
    serves), the least regretted first, at most ADJACENT_PER_ROW of them a row."""
    A = model.A.tocsc()
    assert model.choice is not None
    rank = np.empty(len(regret_order), dtype=int)
    rank[regret_order] = np.arange(len(regret_order))
    rows = model.A.tocsr()[np.unique(A[:, np.flatnonzero(frac)].indices)]
    picked = []
    for r in range(rows.shape[0]):
        cols = rows.indices[rows.indptr[r]: rows.indptr[r + 1]]
        units = np.unique(model.choice[cols[np.abs(x[cols]) > _INTEGRAL_TOL]])
        units = units[units >= 0]
        picked.append(units[np.argsort(rank[units], kind="stable")][:ADJACENT_PER_ROW])
    return np.unique(np.concatenate(picked)) if picked else np.zeros(0, dtype=int)


def _neighbourhood(choice: np.ndarray, frac: np.ndarray, jobs: np.ndarray) -> np.ndarray:
    """Columns left free: every column of a fractional job or of `jobs`, and every auxiliary
    column (no job: slots, t), whose values follow the jobs'."""
    aux = choice < 0
    free_jobs = np.union1d(choice[frac & ~aux], jobs)
    return aux | np.isin(choice, free_jobs)


def lp_bound(model: MilpArrays, time_limit_s: float = 600.0, vertex: bool = True) -> float:
    """The LP relaxation's optimum: an upper bound on the MIP's.

    Parameters
    ----------
    model : MilpArrays
        The model to maximize; its integrality is relaxed.
    time_limit_s : float, default 600.0
        Wall-clock seconds HiGHS may spend (its time_limit).
    vertex : bool, default True
        Solve it as LP first does, to a vertex. False skips the crossover after the interior
        point method (models of IPM_MIN_ROWS rows or more): the optimum to that method's
        tolerance (1e-8 relative), for a bound alone. A 65,536-GPU joint round (153,189 rows,
        1.65 million columns): 855 s without crossover.

    Returns
    -------
    float
        The relaxation's optimal objective; inf (no bound) when HiGHS did not solve it within
        `time_limit_s`.
    """
    relaxed, _ = _relax(model, time_limit_s, 0, () if vertex else (("run_crossover", "off"),))
    return relaxed.objective if relaxed.status == OPTIMAL else float("inf")


def _relax(model: MilpArrays, time_limit_s: float, seed: int, options: Options = ()) -> tuple[SolveOutcome, np.ndarray]:
    """The LP relaxation and its reduced costs. The relaxation of a round is small in rows:
    HiGHS's presolve cost it as much as the simplex (joint, 64 GPUs / 100 jobs: 20 ms with it,
    10 ms without)."""
    with _instance() as h:
        _highs(h, model, np.zeros_like(model.integer), time_limit_s, 0.0, seed, options=options)
        outcome = _outcome(h, model.integer & False)
        return outcome, np.asarray(h.getSolution().col_dual) if outcome.values is not None else np.zeros(model.num_cols)


def _priced_relax(model: MilpArrays, time_limit_s: float, seed: int, options: Options = ()) -> tuple[SolveOutcome, np.ndarray]:
    """`_relax` by column generation over `model.defer`: the relaxation without the deferred
    columns, then, while some deferred column's reduced cost at its duals is positive, with those
    added (HiGHS goes on from its basis). The point is the whole relaxation's vertex (a deferred
    column left out is nonbasic at 0) and the reduced costs are every column's at the duals that
    prove it optimal (`_least_duals`).
    8 rounds of 2,048 GPUs, joint: their multi-node options out (15,000 of 50,000 columns), none
    priced in, 285 ms against 485 ms for the whole relaxation (means)."""
    defer = model.defer if model.defer is not None else np.zeros(model.num_cols, dtype=bool)
    defer = defer & (model.col_lo == 0)
    if not defer.any():
        return _relax(model, time_limit_s, seed, options)
    t0 = time.perf_counter()
    cols = np.flatnonzero(~defer)
    A = model.A.tocsc()
    with _instance() as h:
        _highs(h, _columns_of(model, A, cols), np.zeros(len(cols), dtype=bool), time_limit_s, 0.0, seed, options=options)
        while True:
            outcome = _outcome(h, np.zeros(len(cols), dtype=bool))
            if outcome.status != OPTIMAL or outcome.values is None:
                return replace(outcome, values=None, solve_s=time.perf_counter() - t0), np.zeros(model.num_cols)
            x = np.zeros(model.num_cols)
            x[cols] = outcome.values
            duals = _least_duals(model, cols, x, np.asarray(h.getSolution().row_dual))
            reduced_cost = model.c - model.A.T @ duals
            priced_in = np.flatnonzero(defer & (reduced_cost > _DUAL_TOL * np.maximum(1.0, np.abs(model.c))))
            defer[priced_in] = False
            left_s = time_limit_s - (time.perf_counter() - t0)
            if not len(priced_in) or left_s <= 0:
                break
            block = A[:, priced_in]
            h.addCols(len(priced_in), model.c[priced_in], model.col_lo[priced_in], model.col_hi[priced_in], block.nnz,
                      block.indptr.astype(np.int32), block.indices.astype(np.int32), block.data.astype(float))
            cols = np.concatenate([cols, priced_in])
            h.setOptionValue("time_limit", float(left_s))
            with _stdout_silenced():
                h.run()
    if len(priced_in):
        outcome = replace(outcome, status=TIME_LIMIT, message="time limit reached while columns priced in")
    return replace(outcome, values=x, solve_s=time.perf_counter() - t0), reduced_cost


_DUAL_TOL = 1e-7  # HiGHS's dual feasibility tolerance (its default)


def _columns_of(model: MilpArrays, A: sp.csc_matrix, cols: np.ndarray) -> MilpArrays:
    """The model over columns `cols` alone (every row kept)."""
    return MilpArrays(c=model.c[cols], offset=model.offset, A=A[:, cols].tocsr(), row_lo=model.row_lo,
                      row_hi=model.row_hi, col_lo=model.col_lo[cols], col_hi=model.col_hi[cols],
                      integer=np.zeros(len(cols), dtype=bool), one_rows=model.one_rows, crash=model.crash,
                      scaled=model.scaled)


def _least_duals(model: MilpArrays, cols: np.ndarray, x: np.ndarray, duals: np.ndarray) -> np.ndarray:
    """Optimal duals of the relaxation over `cols` (point x, HiGHS's optimal duals `duals`) with
    each block of `model.least_dual_rows`, in order, at its least values (MilpArrays): a row r
    whose columns in `cols` all sit at 0 gets the largest of rc_k / A_rk + pi_r over those with
    A_rk > 0 (rc_k their reduced cost), the least pi_r keeping each dual feasible at its lower
    bound. Still optimal: r is an equality row with a zero right-hand side (the dual objective
    does not move), `duals` met these bounds so pi_r only falls, which keeps the columns with
    A_rk < 0 dual feasible, and a later block's rows take the bounds of the columns it shares
    with earlier ones (a column meets a block in one row at most)."""
    inside = np.zeros(model.num_cols, dtype=bool)
    inside[cols] = True
    least = duals.copy()
    for block in model.least_dual_rows:
        rows = block[model.row_lo[block] == model.row_hi[block]]
        part = model.A[rows].tocoo()
        on = inside[part.col]
        idle = np.ones(len(rows), dtype=bool)
        idle[part.row[on & (x[part.col] != 0)]] = False
        reduced_cost = model.c - model.A.T @ least
        lift = on & (part.data > 0)
        bound = np.full(len(rows), -np.inf)
        np.maximum.at(bound, part.row[lift], reduced_cost[part.col[lift]] / part.data[lift] + least[rows[part.row[lift]]])
        settle = idle & np.isfinite(bound)
        least[rows[settle]] = bound[settle]
    return least


def _run(model: MilpArrays, integer: np.ndarray, time_limit_s: float, mip_gap: float, seed: int,
         presolve: bool = False, stop: StopSignal | None = None, options: Options = ()) -> SolveOutcome:
    with _instance() as h:
        _highs(h, model, integer, time_limit_s, mip_gap, seed, presolve, stop, options)
        return _outcome(h, integer)


def _run_restricted(model: MilpArrays, time_limit_s: float, mip_gap: float, seed: int, options: Options) -> SolveOutcome:
    """The MIP of a model most of whose columns are fixed (col_lo == col_hi), solved as the
    smaller model of its free columns: the fixed ones moved into the row bounds and the offset,
    the rows left without a free column dropped (infeasible if one does not hold). HiGHS's
    presolve removes them too, but took 25 ms of a 26 ms MIP over the 300 free columns of a
    15,000-column round; it runs on the small model (RESTRICTED_PRESOLVE_MAX_COLS). Values come
    back for every column of `model`."""
    free = model.col_lo < model.col_hi
    fixed = np.where(free, 0.0, model.col_lo)
    activity = model.A @ fixed
    A = model.A.tocsc()[:, free].tocsr()
    rows = np.diff(A.indptr) > 0
    tol = 1e-9 * np.maximum(1.0, np.abs(activity))
    if ((activity < model.row_lo - tol) | (activity > model.row_hi + tol))[~rows].any():
        return SolveOutcome(FAILED, None, float("nan"), float("nan"), 0.0, "the fixed columns break a row")
    small = MilpArrays(c=model.c[free], offset=model.offset + float(model.c @ fixed), A=A[rows],
                       row_lo=(model.row_lo - activity)[rows], row_hi=(model.row_hi - activity)[rows],
                       col_lo=model.col_lo[free], col_hi=model.col_hi[free], integer=model.integer[free],
                       start=None if model.start is None else model.start[free])
    found = _run(small, small.integer, time_limit_s, mip_gap, seed, presolve=small.num_cols < RESTRICTED_PRESOLVE_MAX_COLS,
                 options=(("mip_max_nodes", RESTRICTED_MAX_NODES),) + tuple(options))
    if found.values is None:
        return found
    values = fixed.copy()
    values[free] = found.values
    return replace(found, values=values)


# A round's MIP is small in rows and its LP bound near the optimum: HiGHS's presolve (unless
# most columns are fixed, as in a neighbourhood), restarts and sub-MIP heuristics cost more than
# they find. On the slowest MIPs of a Pollux replay (64 GPUs, ~25 jobs) they took 322 ms for 7
# rounds, 75 ms without; same optima.
_OPTIONS = {"mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False,
            "mip_heuristic_run_feasibility_jump": False, "mip_heuristic_run_root_reduced_cost": False}


# LPs of at least this many rows go to HiGHS's interior point solver (with crossover, so the
# answer is still a vertex with few fractional jobs): a simplex iteration costs with the basis,
# i.e. the rows. Relaxations of random goodput rounds (about 4 columns a row), dual simplex vs
# IPM: 2,552 rows 64 vs 65 ms; 10,235 rows 757 vs 312 ms; 20,500 rows 2.88 vs 0.95 s. A joint
# round's has many more columns a row (2,048 GPUs / 1,000 jobs: 2,312 rows, 46,000 columns):
# simplex 0.6 s, IPM 5.8 s.
IPM_MIN_ROWS = 8_000


@contextmanager
def _instance() -> Iterator[highspy.Highs]:
    """A new HiGHS instance for the block, let go of at its end. highspy's Highs refers to itself
    (each of its callbacks holds it), so an instance, its model and its factorization outlive
    their last use until Python's collector next runs, and that pass pays for destroying them:
    the pass after a 64-GPU round took 190-270 us with its two instances in it (the round's and
    its LP bound's), 80-100 without, and a large round held its model in memory meanwhile.
    Emptying the list of callbacks at the end of the block breaks the cycle, so the instance goes
    as the block ends."""
    h = highspy.Highs()
    try:
        yield h
    finally:
        h.callbacks = []


def _highs(h: highspy.Highs, model: MilpArrays, integer: np.ndarray, time_limit_s: float, mip_gap: float, seed: int,
           presolve: bool = False, stop: StopSignal | None = None, options: Options = ()) -> None:
    """`model` (the columns in `integer` integral) into a new instance `h`, solved there."""
    h.setOptionValue("output_flag", False)
    h.setOptionValue("presolve", "on" if presolve else "off")
    if model.num_rows >= IPM_MIN_ROWS and not integer.any():
        h.setOptionValue("solver", "ipm")
    for name, value in _OPTIONS.items():
        h.setOptionValue(name, value)
    h.setOptionValue("threads", 1)
    if not integer.any() and not model.scaled and _well_scaled(model):
        h.setOptionValue("simplex_scale_strategy", 0)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    h.setOptionValue("random_seed", int(seed))
    set_options(h, options)
    A = model.A.tocsr()
    h.passModel(
        model.num_cols, model.num_rows, A.nnz, _ROWWISE, _MAXIMIZE, model.offset,
        model.c, model.col_lo, model.col_hi, model.row_lo, model.row_hi,
        A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(float),
        integer.astype(np.int32),
    )
    if model.crash and model.one_rows is not None and not integer.any() and h.getOptionValue("solver") != "ipm":
        h.setBasis(_crash_basis(model))
    if model.start is not None and integer.any():
        start = highspy.HighsSolution()
        start.col_value = model.start.tolist()
        start.value_valid = True
        h.setSolution(start)
    if stop is not None:
        h.HandleUserInterrupt = True  # checks for cancelSolve() in HiGHS's interrupt callbacks
        stop.on_stop(h.cancelSolve)
    t0 = time.perf_counter()
    with _stdout_silenced():
        if solver_log_on():  # here: HiGHS prints its banner the moment its output is turned on
            h.setOptionValue("output_flag", True)
        h.run()
    h.solve_s = time.perf_counter() - t0


_LOWER, _BASIC, _UPPER = highspy.HighsBasisStatus.kLower, highspy.HighsBasisStatus.kBasic, highspy.HighsBasisStatus.kUpper


def _crash_basis(model: MilpArrays) -> highspy.HighsBasis:
    """A dual feasible starting basis of the relaxation from its one-of rows (MilpArrays.one_rows):
    in each, its best column (the largest positive cost, of a row without a fixed column) basic
    and the row at its bound 1, its other columns at 0; every other row's slack basic and every
    other column at the bound its cost prefers. The duals are each such row's best cost, so no
    column can gain. HiGHS's own start puts every column of positive cost at its upper bound,
    each job's every option: a 2,048-GPU joint relaxation took 4,800 dual simplex iterations
    from it, 3,200 from this one (155 -> 110 ms)."""
    assert model.one_rows is not None
    upper = (model.c > 0) & np.isfinite(model.col_hi)
    status = np.where(upper, 2, 0)  # 0 lower, 1 basic, 2 upper
    row_status = np.ones(model.num_rows, dtype=int)
    position, col, _ = model.one_row_entries()
    row = model.one_rows[position]
    fixed = np.zeros(model.num_rows, dtype=bool)
    fixed[row[model.col_lo[col] > 0]] = True
    mine = ~fixed[row]
    col, row = col[mine], row[mine]
    status[col] = 0
    order = np.lexsort((-model.c[col], row))
    best = order[np.r_[True, row[order][1:] != row[order][:-1]]] if len(order) else order
    best = best[model.c[col[best]] > 0]
    status[col[best]] = 1
    row_status[row[best]] = 2
    basis = highspy.HighsBasis()
    codes = np.array([_LOWER, _BASIC, _UPPER], dtype=object)
    basis.col_status = codes[status].tolist()
    basis.row_status = codes[row_status].tolist()
    basis.valid = True
    return basis


# HiGHS scales a model unless that improves its equilibration by less than 1x. A round's
# matrix holds GPU counts (entries 1-64): scaled anyway (an improvement of 1.07x on a 2,048-GPU
# joint relaxation), half of those relaxations took twice the time per simplex iteration (8
# rounds without their multi-node options: 222-656 ms scaled, 222-523 ms not; mean 439 vs 285).
# A model asks for it (MilpArrays.scaled False) and is left unscaled where it is well scaled:
# goodput's relaxations took the same time either way (64, 2,048 GPUs, three types at 2,048).
WELL_SCALED_RANGE = 100.0


def _well_scaled(model: MilpArrays) -> bool:
    """Whether the matrix's nonzeros lie within WELL_SCALED_RANGE of each other in magnitude."""
    magnitude = np.abs(model.A.data)
    magnitude = magnitude[magnitude > 0]
    return not len(magnitude) or magnitude.max() <= WELL_SCALED_RANGE * magnitude.min()


def set_options(h: highspy.Highs, options: Options) -> None:
    """settings.solver_options on a HiGHS instance; InputError naming each one it rejects."""
    rejected = [f"settings.solver_options.{name}: HiGHS has no such option or does not take {value!r} for it; "
                f"see {HIGHS_OPTIONS_URL}" for name, value in options
                if h.setOptionValue(name, value) != highspy.HighsStatus.kOk]
    if rejected:
        raise InputError(rejected)


def check_options(options: Options) -> None:
    """Raise InputError for the options HiGHS would reject (for routes that set them unchecked)."""
    with _instance() as h:
        h.setOptionValue("output_flag", False)
        set_options(h, options)


def _outcome(h: highspy.Highs, integer: np.ndarray) -> SolveOutcome:
    status = h.getModelStatus()
    info = h.getInfo()
    if info.primal_solution_status != 2:  # kSolutionStatusFeasible: no point
        return SolveOutcome(FAILED, None, float("nan"), float("nan"), h.solve_s, h.modelStatusToString(status))
    values = np.asarray(h.getSolution().col_value)
    kind = OPTIMAL if status == highspy.HighsModelStatus.kOptimal else TIME_LIMIT
    bound = info.mip_dual_bound if integer.any() else info.objective_function_value
    return SolveOutcome(kind, values, info.objective_function_value, bound, h.solve_s, h.modelStatusToString(status))
