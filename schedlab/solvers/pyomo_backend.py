"""Solve a Pyomo model: HiGHS through Pyomo's APPSI interface, or any Pyomo solver by name.

The Pyomo model is the readable reference and the route to every solver Pyomo knows (CBC,
GLPK, SCIP, Gurobi, ...). `values` in the outcome holds `model.columns` in order: the point in
the layout of the model's arrays (formulations.base).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import sys
import time
from typing import Any

import numpy as np
import pyomo.environ as pyo
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs

from schedlab.errors import SolverError
from schedlab.milp import FAILED, OPTIMAL, TIME_LIMIT, SolveOutcome
from schedlab.solvers.highs_direct import check_options
from schedlab.solvers.log import solver_log_on
from schedlab.solvers.pyomo_options import LEGACY_OPTIONS

__all__ = ["solve_appsi_highs", "solve_legacy"]

_TOL = 1e-7  # relative: solvers' own feasibility and optimality tolerances are ~1e-9 to 1e-6
Options = tuple[tuple[str, Any], ...]  # settings.solver_options


@functools.cache
def _stderr_logger() -> logging.Logger:
    """A logger on a copy of stderr's descriptor: APPSI captures fds 1 and 2 while HiGHS runs and
    hands the log to a logger (with stream_solver it also writes the log to sys.stdout, inside
    its own capture, and deadlocks)."""
    log = logging.getLogger("schedlab.solver_log")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(logging.StreamHandler(os.fdopen(os.dup(2), "w", buffering=1)))
    return log


def _log_to_stderr() -> contextlib.AbstractContextManager:
    """Pyomo streams a solver's log (tee) to sys.stdout, where `schedlab solve` writes its JSON."""
    return contextlib.redirect_stdout(sys.stderr) if solver_log_on() else contextlib.nullcontext()


def _pyomo_logs_to_stderr() -> None:
    """Pyomo writes its ERROR: and WARNING: lines to stdout, where `schedlab solve` writes its
    JSON: they go to stderr instead."""
    for handler in logging.getLogger("pyomo").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


_pyomo_logs_to_stderr()


def _column_values(model: pyo.ConcreteModel) -> np.ndarray:
    """The point in the array layout: the values of `model.columns` (formulations.base)."""
    return np.array([pyo.value(v, exception=False) or 0.0 for v in model.columns])


def solve_appsi_highs(model: pyo.ConcreteModel, time_limit_s: float, mip_gap: float,
                      warm_start: bool = False, options: Options = ()) -> SolveOutcome:
    """Solve a Pyomo model with HiGHS through Pyomo's APPSI interface, on one thread.

    Parameters
    ----------
    model : pyomo.environ.ConcreteModel
        A maximization with its variables listed in `model.columns`.
    time_limit_s, mip_gap : float
        HiGHS's time limit (seconds) and relative gap.
    warm_start : bool, default False
        Start HiGHS from the values the model's variables hold.
    options : tuple of (str, value) pairs
        HiGHS options, checked first (APPSI would set them without looking at HiGHS's answer).

    Returns
    -------
    SolveOutcome
        The values of `model.columns` (the array layout); failed without a feasible point.
    """
    check_options(options)  # APPSI sets HiGHS options without looking at what HiGHS says
    opt = Highs()
    opt.config.time_limit = float(time_limit_s)
    opt.config.mip_gap = float(mip_gap)
    opt.config.load_solution = False
    opt.config.warmstart = warm_start
    if solver_log_on():
        opt.config.solver_output_logger = _stderr_logger()
    opt.highs_options = {"threads": 1, **dict(options)}
    t0 = time.perf_counter()
    res = opt.solve(model)
    solve_s = time.perf_counter() - t0
    if res.best_feasible_objective is None:
        return SolveOutcome(FAILED, None, math.nan, math.nan, solve_s, str(res.termination_condition))
    res.solution_loader.load_vars()
    kind = OPTIMAL if res.termination_condition == TerminationCondition.optimal else TIME_LIMIT
    return SolveOutcome(kind, _column_values(model), res.best_feasible_objective, res.best_objective_bound, solve_s,
                        str(res.termination_condition))


def solve_legacy(model: pyo.ConcreteModel, time_limit_s: float, mip_gap: float, warm_start: bool = False,
                 options: Options = (), *, solver: str) -> SolveOutcome:
    """`solver` through Pyomo's SolverFactory with its options of LEGACY_OPTIONS, one thread.
    With `warm_start` the model holds a feasible start: it is given to the solver only where it
    honours it, and it checks the answer either way: a status "optimal" below the start (or
    above the solver's own bound) is not believed; the better point is kept, flagged time_limit."""
    opt = pyo.SolverFactory(solver)
    if opt is None or not opt.available(exception_flag=False):
        raise SolverError(f"solver {solver!r} is not available to Pyomo; install it or use 'highs' or 'cpsat'")
    table = LEGACY_OPTIONS[solver]
    opt.options[table.time_limit] = max(math.ceil(time_limit_s), 1) if table.whole_seconds else time_limit_s
    opt.options[table.gap] = mip_gap
    if table.threads is not None:
        opt.options[table.threads] = 1
    opt.options.update(dict(options))
    start = (_column_values(model), pyo.value(model.obj)) if warm_start else None
    t0 = time.perf_counter()
    with _log_to_stderr():
        res = opt.solve(model, load_solutions=False, tee=solver_log_on(),
                        **({"warmstart": True} if warm_start and table.takes_start else {}))
    solve_s = time.perf_counter() - t0
    if len(res.solution) == 0:
        if start is not None:
            return SolveOutcome(TIME_LIMIT, start[0], start[1], math.nan, solve_s,
                                f"{solver}: {res.solver.termination_condition}, no point: the start")
        return SolveOutcome(FAILED, None, math.nan, math.nan, solve_s, str(res.solver.termination_condition))
    model.solutions.load_from(res)
    objective = pyo.value(model.obj)
    optimal = res.solver.termination_condition == pyo.TerminationCondition.optimal
    upper = res.problem.upper_bound  # a maximization's best bound, where the solver reports one
    bound = math.inf if upper is None or not math.isfinite(upper) else float(upper)
    message = str(res.solver.termination_condition)
    if start is not None and objective < start[1] - _TOL * max(1.0, abs(start[1])):
        return SolveOutcome(TIME_LIMIT, start[0], start[1], math.nan, solve_s,
                            f"{solver} reported {message} at {objective:.6g}, below the start's {start[1]:.6g}: "
                            "not believed; the start is the answer")
    if objective > bound + _TOL * max(1.0, abs(bound)):  # a bound below a point it found is no bound
        return SolveOutcome(TIME_LIMIT, _column_values(model), objective, math.nan, solve_s,
                            f"{solver} reported {message} with a bound {bound:.6g} below its point; not proven")
    return SolveOutcome(OPTIMAL if optimal else TIME_LIMIT, _column_values(model), objective,
                        objective if optimal else bound, solve_s, message)
