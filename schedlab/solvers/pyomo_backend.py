"""Solve a Pyomo model: HiGHS through Pyomo's APPSI interface, or any Pyomo solver by name.

The Pyomo model is the readable reference and the route to every solver Pyomo knows (CBC,
GLPK, SCIP, Gurobi, ...). `values` in the outcome holds `model.columns` in order: the point in
the layout of the model's arrays (formulations.base).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyomo.environ as pyo
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs

from schedlab.errors import SolverError
from schedlab.solvers.outcome import FAILED, OPTIMAL, TIME_LIMIT, SolveOutcome

# Time-limit option names of common Pyomo solvers (legacy interface); others run unlimited.
_TIME_LIMIT_OPTION = {"cbc": "sec", "glpk": "tmlim", "scip": "limits/time", "gurobi": "TimeLimit",
                      "cplex": "timelimit", "cplex_direct": "timelimit", "gurobi_direct": "TimeLimit"}
_GAP_OPTION = {"cbc": "ratioGap", "glpk": "mipgap", "scip": "limits/gap", "gurobi": "MIPGap",
               "cplex": "mip_tolerances_mipgap", "gurobi_direct": "MIPGap"}


def _column_values(model: pyo.ConcreteModel) -> np.ndarray:
    """The point in the array layout: the values of `model.columns` (formulations.base)."""
    return np.array([pyo.value(v, exception=False) or 0.0 for v in model.columns])


def set_start(model: pyo.ConcreteModel, start: np.ndarray) -> None:
    """Load a warm-start point given in the array layout (the order of `model.columns`)."""
    for v, value in zip(model.columns, start):
        v.set_value(float(value), skip_validation=True)


def solve_appsi_highs(model: pyo.ConcreteModel, time_limit_s: float, mip_gap: float,
                      warm_start: bool = False) -> SolveOutcome:
    opt = Highs()
    opt.config.time_limit = float(time_limit_s)
    opt.config.mip_gap = float(mip_gap)
    opt.config.load_solution = False
    opt.config.warmstart = warm_start
    opt.highs_options = {"threads": 1}
    t0 = time.perf_counter()
    res = opt.solve(model)
    solve_s = time.perf_counter() - t0
    if res.best_feasible_objective is None:
        return SolveOutcome(FAILED, None, math.nan, math.nan, solve_s, str(res.termination_condition))
    res.solution_loader.load_vars()
    kind = OPTIMAL if res.termination_condition == TerminationCondition.optimal else TIME_LIMIT
    return SolveOutcome(kind, _column_values(model), res.best_feasible_objective, res.best_objective_bound, solve_s,
                        str(res.termination_condition))


def solve_legacy(model: pyo.ConcreteModel, time_limit_s: float, mip_gap: float, warm_start: bool = False, *,
                 solver: str) -> SolveOutcome:
    opt = pyo.SolverFactory(solver)
    if opt is None or not opt.available(exception_flag=False):
        raise SolverError(f"solver {solver!r} is not available to Pyomo; install it or use 'highs' or 'cpsat'")
    if solver in _TIME_LIMIT_OPTION:
        opt.options[_TIME_LIMIT_OPTION[solver]] = time_limit_s
    if solver in _GAP_OPTION:
        opt.options[_GAP_OPTION[solver]] = mip_gap
    kwargs = {"warmstart": True} if warm_start and getattr(opt, "warm_start_capable", lambda: False)() else {}
    t0 = time.perf_counter()
    res = opt.solve(model, load_solutions=False, **kwargs)
    solve_s = time.perf_counter() - t0
    if len(res.solution) == 0:
        return SolveOutcome(FAILED, None, math.nan, math.nan, solve_s, str(res.solver.termination_condition))
    model.solutions.load_from(res)
    objective = pyo.value(model.obj)
    optimal = res.solver.termination_condition == pyo.TerminationCondition.optimal
    bound = res.problem.upper_bound if res.problem.upper_bound is not None else math.inf
    return SolveOutcome(OPTIMAL if optimal else TIME_LIMIT, _column_values(model), objective,
                        objective if optimal else float(bound), solve_s, str(res.solver.termination_condition))
