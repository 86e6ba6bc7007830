"""The fast path: MilpArrays straight into highspy, no modelling layer in between."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

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


def solve_highs(model: MilpArrays, time_limit_s: float, mip_gap: float, seed: int = 0) -> SolveOutcome:
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    h.setOptionValue("random_seed", int(seed))
    A = model.A.tocsr()
    h.passModel(
        model.num_cols, model.num_rows, A.nnz, _ROWWISE, _MAXIMIZE, model.offset,
        model.c, model.col_lo, model.col_hi, model.row_lo, model.row_hi,
        A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(float),
        model.integer.astype(np.int32),
    )
    if model.start is not None:
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
    return SolveOutcome(kind, values, info.objective_function_value, info.mip_dual_bound, solve_s, h.modelStatusToString(status))
