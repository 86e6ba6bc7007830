"""The fast path: MilpArrays straight into highspy, no modelling layer in between.

LP first (the design notes' measurement, and ours on the joint round): with one choice row per
job and few coupling rows, the LP relaxation's vertex is often integral already, and HiGHS finds
it in a fraction of the time its MIP search takes to prove the same point. So the relaxation is
solved first; if its point is integral on every integer column it is optimal for the MIP (its
bound is the relaxation's), and only otherwise does the MIP run, warm-started as before."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import replace

import highspy
import numpy as np

from schedlab.solvers.arrays import MilpArrays
from schedlab.solvers.outcome import FAILED, OPTIMAL, TIME_LIMIT, SolveOutcome

_ROWWISE, _MAXIMIZE = 2, -1


@contextmanager
def _stdout_silenced():
    """HiGHS 1.12.0 (pinned for ortools) printf()s a stray debug line to the process's stdout
    during some MIP solves, whatever output_flag says (ERGO-Code/HiGHS#2783, fixed upstream
    later); it would corrupt JSON written to stdout, so fd 1 points at /dev/null meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


_INTEGRAL_TOL = 1e-9


def solve_highs(model: MilpArrays, time_limit_s: float, mip_gap: float, seed: int = 0,
                lp_first: bool = True) -> SolveOutcome:
    t0 = time.perf_counter()
    if not model.num_cols:  # nothing to decide (no job has an option): optimal at the offset
        return SolveOutcome(OPTIMAL, np.zeros(0), model.offset, model.offset, 0.0, "empty model")
    if lp_first and model.integer.any():
        relaxed = _run(model, np.zeros_like(model.integer), time_limit_s, mip_gap, seed, presolve=False)
        if relaxed.status == OPTIMAL and _integral(relaxed.values, model):
            return replace(relaxed, bound=relaxed.objective, message="LP relaxation integral")
        left_s = time_limit_s - (time.perf_counter() - t0)
        if left_s <= 0 and model.start is not None:  # no time for the MIP: the warm start, unproven
            bound = relaxed.objective if relaxed.status == OPTIMAL else float("inf")
            return SolveOutcome(TIME_LIMIT, model.start, model.objective(model.start), bound,
                                time.perf_counter() - t0, "time limit reached in the LP relaxation")
        time_limit_s = max(left_s, 1e-3)
    outcome = _run(model, model.integer, time_limit_s, mip_gap, seed)
    return replace(outcome, solve_s=time.perf_counter() - t0)


def _integral(values: np.ndarray, model: MilpArrays) -> bool:
    v = values[model.integer]
    return bool(np.all(np.abs(v - np.round(v)) <= _INTEGRAL_TOL))


def _run(model: MilpArrays, integer: np.ndarray, time_limit_s: float, mip_gap: float, seed: int,
         presolve: bool = True) -> SolveOutcome:
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    # The relaxation of a round is small in rows: HiGHS's presolve cost it as much as the simplex
    # (joint, 64 GPUs / 100 jobs: 20 ms with it, 10 ms without).
    h.setOptionValue("presolve", "on" if presolve else "off")
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    h.setOptionValue("random_seed", int(seed))
    A = model.A.tocsr()
    h.passModel(
        model.num_cols, model.num_rows, A.nnz, _ROWWISE, _MAXIMIZE, model.offset,
        model.c, model.col_lo, model.col_hi, model.row_lo, model.row_hi,
        A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(float),
        integer.astype(np.int32),
    )
    if model.start is not None and integer.any():
        start = highspy.HighsSolution()
        start.col_value = model.start.tolist()
        start.value_valid = True
        h.setSolution(start)
    t0 = time.perf_counter()
    with _stdout_silenced():
        h.run()
    solve_s = time.perf_counter() - t0
    status = h.getModelStatus()
    info = h.getInfo()
    has_point = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if not has_point:
        return SolveOutcome(FAILED, None, float("nan"), float("nan"), solve_s, h.modelStatusToString(status))
    values = np.asarray(h.getSolution().col_value)
    kind = OPTIMAL if status == highspy.HighsModelStatus.kOptimal else TIME_LIMIT
    bound = info.mip_dual_bound if integer.any() else info.objective_function_value
    return SolveOutcome(kind, values, info.objective_function_value, bound, solve_s, h.modelStatusToString(status))
