"""The same MilpArrays solved by OR-Tools CP-SAT.

CP-SAT needs integers: rows with fractional coefficients (the max-min rows, placement's
(lost)) and the objective are scaled by `scale` and rounded; continuous columns (max-min's t,
placement's p) become integers in those scaled units. Rounding is outward, so every point of
the model stays a point of the scaled one: continuous bounds are floored and ceiled away from
the box, and a scaled row is widened by the most its rounded coefficients can move it over the
columns' bounds. (Bounds rounded inward and coefficients to nearest had made a spread job on
its fastest GPUs infeasible, p = 1/tau_0 exactly, whenever 1e6/tau_0 rounded up: CP-SAT
"proved" placements 0.1 % short.) The reported objective is recomputed from the unscaled model.
The objective keeps its constant (offset): CP-SAT's relative gap is taken of the objective it
sees, and a p-mean round's sum of x-coefficients is often ~1000x its whole objective (the
offset is sum_j U0_j), so without it "optimal at 1e-4" was up to 2e-2 short.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from schedlab.errors import InputError
from schedlab.milp import FAILED, OPTIMAL, TIME_LIMIT, MilpArrays, SolveOutcome
from schedlab.solvers.log import solver_log_on, to_stderr
from schedlab.solvers.outcome import StopSignal, start_outcome

__all__ = ["CPSAT_PARAMETERS_URL", "DEFAULT_SCALE", "solve_cpsat"]

DEFAULT_SCALE = 1e6
CPSAT_PARAMETERS_URL = "https://github.com/google/or-tools/blob/stable/ortools/sat/sat_parameters.proto"


_ROWS_PER_CHECK = 256  # rows written between two looks at the clock


def _deadline(t0: float, time_limit_s: float, model: MilpArrays) -> Callable[[str], SolveOutcome | None]:
    """A check of the time limit while the CP-SAT model is written (in Python, 25 ms for a
    2,048-GPU goodput round): past it, the model's warm start (unproven) or a failure, without searching."""
    def check(doing: str) -> SolveOutcome | None:
        spent_s = time.perf_counter() - t0
        if spent_s < time_limit_s:
            return None
        failed = SolveOutcome(FAILED, None, float("nan"), float("nan"), spent_s, f"out of time {doing}")
        return start_outcome(model, failed, spent_s)
    return check


def _stopped(stop: StopSignal | None, t0: float) -> SolveOutcome | None:
    """A failure, without searching, where another solver has stopped the race already."""
    if stop is None or not stop.stopped:
        return None
    return SolveOutcome(FAILED, None, float("nan"), float("nan"), time.perf_counter() - t0,
                        "stopped before its search began")


# _STOPPED_BEFORE: CpSolver.stop_search stops the search of a solve() under way and does nothing
# before one begins, so a race that HiGHS won while CP-SAT was still loading or writing its model
# went on until CP-SAT's own proof: the first race of a Philly replay (a 131-job round, OR-Tools
# imported in it) took 311 ms where HiGHS proved it in 27, and 209-223 ms with CP-SAT stopped
# before its search (~0.18 s of its import). CP-SAT looks at the signal while it writes its rows
# and once more, after registering its stop, just before it solves (a stop in the microseconds
# between that look and solve()'s start is still missed).


_INT64 = np.iinfo(np.int64)  # a linear row's unbounded side, as CP-SAT writes it


def _linear(proto: Any, cols: np.ndarray, coeffs: np.ndarray, lo: int, hi: int) -> None:
    """The row lo <= sum_i coeffs[i] v[cols[i]] <= hi, appended to the CpModelProto."""
    row = proto.constraints.add().linear
    row.vars.extend(cols.tolist())
    row.coeffs.extend(coeffs.astype(np.int64).tolist())
    row.domain.extend((lo, hi))


def _is_integral(values: np.ndarray) -> bool:
    return bool(np.all(np.abs(values - np.round(values)) < 1e-9))


def solve_cpsat(model: MilpArrays, time_limit_s: float, mip_gap: float, seed: int = 0, workers: int = 1,
                scale: float = DEFAULT_SCALE, stop: StopSignal | None = None,
                solver_options: tuple[tuple[str, Any], ...] = ()) -> SolveOutcome:
    """Solve a MILP given as arrays with CP-SAT, scaled to integers as the module docstring says.

    CP-SAT runs with its LP relaxation on every row (linearization_level 2), the model's start
    as a hint, and stops at `mip_gap` relative to its own bound. The objective reported is the
    unscaled model's at the point found; the bound is CP-SAT's, unscaled.

    Parameters
    ----------
    model : MilpArrays
        The model to maximize.
    time_limit_s : float
        Wall-clock seconds, writing the CP-SAT model included.
    mip_gap : float
        Relative gap at which the search stops (CP-SAT's relative_gap_limit).
    seed : int, default 0
        CP-SAT's random seed (taken modulo 2^31).
    workers : int, default 1
        CP-SAT's search workers (threads).
    scale : float, default DEFAULT_SCALE
        Units per 1 of a continuous column or a fractional row.
    stop : StopSignal, optional
        Lets another solver stop this search (a race: solvers.portfolio).
    solver_options : tuple of (str, value) pairs
        CP-SAT parameters (SatParameters fields) set after schedlab's.

    Returns
    -------
    SolveOutcome
        optimal or time_limit with a point; out of time without one, the model's start if it
        has one (time_limit, unproven); failed otherwise.

    Raises
    ------
    InputError
        An option CP-SAT does not have or does not take that value for.
    """
    from ortools.sat.python import cp_model  # here: OR-Tools loads only for rounds it solves

    t0 = time.perf_counter()  # writing the CP-SAT model counts: it can outlast a tight limit

    cp = cp_model.CpModel()
    col_scale = np.where(model.integer, 1.0, scale)
    col_lo, col_hi = np.maximum(model.col_lo, -1e12) * col_scale, np.minimum(model.col_hi, 1e12) * col_scale
    lo = np.where(model.integer, np.ceil(col_lo), np.floor(col_lo)).astype(int)
    hi = np.where(model.integer, np.floor(col_hi), np.ceil(col_hi)).astype(int)
    magnitude = np.maximum(np.abs(lo), np.abs(hi))
    out_of_time = _deadline(t0, time_limit_s, model)
    # The model is written into its proto from the arrays, as CpModel's own methods would write it
    # (v{i} with its domain; a linear row per finite bound, its zero coefficients left out; the
    # objective negated, CP-SAT minimizes), without a Python expression per term: 1,000 columns
    # took 6-13 ms that way, the GIL held while the race's HiGHS waited to start.
    proto = cp.proto
    for i, (lo_i, hi_i) in enumerate(zip(lo.tolist(), hi.tolist())):
        var = proto.variables.add()
        var.name = f"v{i}"
        var.domain.extend((lo_i, hi_i))
    A = model.A.tocsr()
    for r in range(model.num_rows):
        if r % _ROWS_PER_CHECK == 0 and (late := out_of_time("writing its rows") or _stopped(stop, t0)):
            return late
        idx, coef = A.indices[A.indptr[r]:A.indptr[r + 1]], A.data[A.indptr[r]:A.indptr[r + 1]]
        coef = coef / col_scale[idx]  # coefficients per scaled column unit
        row_scale = 1.0 if _is_integral(coef) else scale
        rounded = np.round(coef * row_scale)
        slack = 0 if row_scale == 1.0 else int(math.ceil(np.abs(rounded - coef * row_scale) @ magnitude[idx]))
        cols, coeffs = idx[rounded != 0], rounded[rounded != 0]
        if np.isfinite(model.row_hi[r]):
            _linear(proto, cols, coeffs, int(_INT64.min), int(math.floor(model.row_hi[r] * row_scale + 1e-9)) + slack)
        if np.isfinite(model.row_lo[r]):
            _linear(proto, cols, coeffs, int(math.ceil(model.row_lo[r] * row_scale - 1e-9)) - slack, int(_INT64.max))
    # 1e9 / max|c| keeps ~1e-9 relative precision on every objective coefficient in int64.
    obj_scale = 1e3 * scale / max(np.abs(model.c).max(initial=0.0), 1e-12)
    offset = int(round(model.offset * obj_scale))
    obj_coef = np.round(model.c / col_scale * obj_scale).astype(np.int64)
    on = np.flatnonzero(obj_coef)
    proto.objective.vars.extend(on.tolist())
    proto.objective.coeffs.extend((-obj_coef[on]).tolist())
    proto.objective.offset = -offset
    proto.objective.scaling_factor = -1.0
    if model.start is not None:
        proto.solution_hint.vars.extend(range(model.num_cols))
        proto.solution_hint.values.extend(np.round(model.start * col_scale).astype(np.int64).tolist())
    if late := out_of_time("writing its objective and hint"):
        return late

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(float(time_limit_s) - (time.perf_counter() - t0), 1e-3)
    solver.parameters.relative_gap_limit = float(mip_gap)
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(seed) % 2**31  # an int32 there; the schema allows any int
    # CP-SAT's LP relaxation with every linear row and its cuts (default: 1, fewer): our models
    # are MILPs whose proofs are LP bounds. Random 256-GPU / 128-job goodput rounds, one worker:
    # 3 of 6 unproven in 10 s -> all proven in <= 0.6 s; full 64-GPU placement rounds: 2 of 5
    # unproven in 6 s -> all proven in <= 1.4 s.
    solver.parameters.linearization_level = 2
    for name, value in solver_options:
        try:
            setattr(solver.parameters, name, value)
        except (AttributeError, TypeError, ValueError):
            raise InputError([f"settings.solver_options.{name}: CP-SAT has no such parameter or does not take "
                              f"{value!r} for it; see {CPSAT_PARAMETERS_URL}"]) from None
    if solver_log_on():
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = to_stderr
    if stop is not None:
        stop.on_stop(solver.stop_search)
        if stopped := _stopped(stop, t0):  # stop_search stops only a search under way: _STOPPED_BEFORE
            return stopped
    status = solver.solve(cp)
    solve_s = time.perf_counter() - t0
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        failed = SolveOutcome(FAILED, None, float("nan"), float("nan"), solve_s, solver.status_name(status))
        # out of time (UNKNOWN) with no point: the warm start, as highs answers (a race has none)
        return start_outcome(model, failed, solve_s) if status == cp_model.UNKNOWN else failed
    values = np.array(solver.response_proto.solution, dtype=float) / col_scale
    bound = (solver.best_objective_bound - offset) / obj_scale + model.offset
    kind = OPTIMAL if status == cp_model.OPTIMAL else TIME_LIMIT
    return SolveOutcome(kind, values, model.objective(values), bound, solve_s, solver.status_name(status))
