"""Solve a Pyomo model: HiGHS through Pyomo's APPSI interface, or any Pyomo solver by name.

The Pyomo model is the readable reference and the route to every solver Pyomo knows (CBC,
GLPK, SCIP, Gurobi, ...). `values` in the outcome holds the model's `x` variables in order.
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


def _x_values(model: pyo.ConcreteModel) -> np.ndarray:
    return np.array([pyo.value(model.x[c], exception=False) or 0.0 for c in model.C])


def set_start(model: pyo.ConcreteModel, start: np.ndarray) -> None:
    """Load a warm-start point given in the array layout (x, then w in model.K2L order, then t)."""
    n = len(model.C)
    for c in model.C:
        model.x[c].set_value(float(start[c]))
    for i, kd in enumerate(model.K2L):
        model.w[kd].set_value(float(start[n + i]))
    if hasattr(model, "t"):
        model.t.set_value(float(start[-1]))


def solve_pyomo(model: pyo.ConcreteModel, solver: str, time_limit_s: float, mip_gap: float,
                warm_start: bool = False) -> SolveOutcome:
    return (_solve_appsi_highs if solver == "highs" else _solve_legacy)(model, solver, time_limit_s, mip_gap, warm_start)


def _solve_appsi_highs(model, solver, time_limit_s, mip_gap, warm_start) -> SolveOutcome:
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
    return SolveOutcome(kind, _x_values(model), res.best_feasible_objective, res.best_objective_bound, solve_s,
                        str(res.termination_condition))


def _solve_legacy(model, solver, time_limit_s, mip_gap, warm_start) -> SolveOutcome:
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
    return SolveOutcome(OPTIMAL if optimal else TIME_LIMIT, _x_values(model), objective,
                        objective if optimal else float(bound), solve_s, str(res.solver.termination_condition))
