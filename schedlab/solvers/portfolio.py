"""HiGHS and CP-SAT on one model: LP first, then the two MIP searches raced, the first proof wins.

A round's MIP is easy when its LP relaxation is tight (many jobs per GPU: HiGHS's LP-first route
proves most rounds in milliseconds) and can be hard when few jobs share many GPUs: the LP bound
is then 1e-4-2e-3 above the integer optimum and branch and bound must close that gap. Which
search closes it first depends on the round, by 10-100x either way:
  - 40 rounds of a 2,560-job Philly replay on 1,024 GPUs (72-250 jobs, 500-1,800 columns):
    HiGHS's full MIP took 1-10 s each (12 hit the 10 s limit), CP-SAT (one worker) 35-800 ms
    for 38 of them;
  - random 256-GPU / 128-job rounds: HiGHS 0.2-0.8 s, CP-SAT over 30 s for 8 of 20.
So:
  1. HiGHS's LP-first search (solvers.highs_direct.lp_first_search: the relaxation and the
     neighbourhoods around it, never its full MIP);
  2. on a small model (fewer than HEAD_START_COLS columns), HiGHS's full MIP alone for
     HEAD_START_S: it proves such rounds in milliseconds, where starting a race costs more (CP-SAT's
     model and a second thread). On the 258 rounds of a 64-GPU Pollux workload (14-178 columns)
     that step 1 did not prove, HiGHS alone proved each in <= 30 ms, 0.50 CPU s in all; the race
     cost 1.74 CPU s (CP-SAT alone 1.27);
  3. unless that proved the round, HiGHS's full MIP (in this thread, started from the best point
     so far where it beats the model's start) and CP-SAT (in another, unhinted: a hint, that
     point's or the model's, made it slower on the Philly rounds) race for the time left; the
     first to prove optimality stops the other (StopSignal). Both release the GIL while they search.
The answer is the best point of them all; its bound the tightest of theirs; OPTIMAL when one
solver proved it or it is within mip_gap of that bound. A race costs two cores' CPU while it lasts.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import replace

from schedlab.milp import OPTIMAL, MilpArrays, SolveOutcome
from schedlab.solvers.cpsat import solve_cpsat
from schedlab.solvers.highs_direct import lp_first_search, solve_highs
from schedlab.solvers.outcome import StopSignal, best_of, start_outcome

__all__ = ["HEAD_START_COLS", "HEAD_START_S", "solve_portfolio"]

HEAD_START_COLS = 256  # the Philly rounds CP-SAT wins by 10-100x have 500-1,800 columns
HEAD_START_S = 0.05


def solve_portfolio(model: MilpArrays, time_limit_s: float, mip_gap: float, seed: int = 0,
                    lp_first: bool = True) -> SolveOutcome:
    """Solve a MILP given as arrays with HiGHS and CP-SAT, steps 1-3 of the module docstring.

    Parameters
    ----------
    model : MilpArrays
        The model to maximize.
    time_limit_s : float
        Wall-clock seconds for all steps together.
    mip_gap : float
        Relative gap at which a point is optimal.
    seed : int, default 0
        Both solvers' random seed.
    lp_first : bool, default True
        Step 1 (HiGHS's LP-first search); False goes straight to steps 2 and 3.

    Returns
    -------
    SolveOutcome
        The best point of every search, with the tightest bound; its message names each
        search's outcome. A model without integer columns is HiGHS's alone.
    """
    t0 = time.perf_counter()
    if not model.num_cols or not model.integer.any():  # nothing to search: HiGHS alone
        return solve_highs(model, time_limit_s, mip_gap, seed, lp_first)
    found = []
    if lp_first:
        first = lp_first_search(model, time_limit_s, mip_gap, seed)
        if first.status == OPTIMAL:
            return replace(first, solve_s=time.perf_counter() - t0)
        found.append(_named("highs LP first", first))
    left_s = time_limit_s - (time.perf_counter() - t0)
    if model.num_cols < HEAD_START_COLS and left_s > 0:
        alone = solve_highs(_from_best(model, found), min(left_s, HEAD_START_S), mip_gap, seed, lp_first=False)
        found.append(_named("highs MIP alone", alone))
        if alone.status == OPTIMAL:
            return replace(best_of(tuple(found), mip_gap), solve_s=time.perf_counter() - t0)
        left_s = time_limit_s - (time.perf_counter() - t0)
    if left_s <= 0 and found:
        best = best_of(tuple(found), mip_gap)
        return best if best.values is not None else start_outcome(model, best, time.perf_counter() - t0)
    stop = StopSignal()

    def racer(solve, *args, **kwargs) -> SolveOutcome:
        out = solve(*args, stop=stop, **kwargs)
        if out.status == OPTIMAL:
            stop.stop()
        return out

    with ThreadPoolExecutor(max_workers=1) as pool:
        cp = pool.submit(copy_context().run, racer, solve_cpsat, replace(model, start=None), left_s, mip_gap, seed)
        highs = racer(solve_highs, _from_best(model, found), left_s, mip_gap, seed, lp_first=False)
        found += [_named("highs MIP", highs), _named("cpsat", cp.result())]
    return replace(best_of(tuple(found), mip_gap), solve_s=time.perf_counter() - t0)


def _from_best(model: MilpArrays, found: list[SolveOutcome]) -> MilpArrays:
    """The model started from the LP-first search's point where it beats the model's own start:
    on 119 Philly rounds that needed the race, HiGHS's MIP alone took 58 s from the start where
    every running job stays, 27 s from the neighbourhood's point."""
    points = [f.values for f in found if f.values is not None]
    if not points:
        return model
    best = max(points, key=model.objective)
    return replace(model, start=best) if model.start is None or model.objective(best) > model.objective(model.start) else model


def _named(solver: str, outcome: SolveOutcome) -> SolveOutcome:
    return replace(outcome, message=f"{solver}: {outcome.message}")
