"""Solvers, one registry: a name -> how to solve any formulation's RoundModel.

    highs        the model's arrays straight into highspy, LP first
    cpsat        the same arrays in OR-Tools CP-SAT (integer-scaled objective)
    portfolio    highs's LP-first search, then highs's full MIP and cpsat raced (the default)
    appsi_highs  the Pyomo model through Pyomo's APPSI HiGHS interface (the readable reference)
    cbc, glpk, scip, gurobi, cplex
                 the Pyomo model through Pyomo's SolverFactory, where installed
Only these names run: a round never names a program of its own (a path, say).
Each entry returns the solver's outcome and the seconds spent building the model it solved.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

from schedlab.errors import SolverError
from schedlab.milp import FAILED, MilpModel, SolveOutcome, set_start
from schedlab.solvers.cpsat import solve_cpsat
from schedlab.solvers.highs_direct import solve_highs
from schedlab.solvers.portfolio import solve_portfolio
from schedlab.solvers.pyomo_options import LEGACY_OPTIONS
from schedlab.state import Settings

__all__ = ["PYOMO_IMPORT_S", "PYOMO_S_PER_NONZERO", "SOLVERS", "ArraySolver", "PyomoSolver", "SolverEntry",
           "array_solver_names", "pyomo_estimate_s", "solver"]


@dataclass(frozen=True)
class ArraySolver:
    """Solves the model's arrays (MilpArrays) with `solve(arrays, time_limit_s, mip_gap, seed)`,
    passing the settings named in `extra` as keywords (e.g. highs's lp_first), and
    settings.solver_options as `solver_options=` unless `options_refused` says why it takes none
    (the InputError of a round that gives it some). A solver whose search starts with LP first
    (settings.lp_first named in `extra`) asks a model that decides its decoupled optimum without
    its arrays (milp.Decouples) first: LP first's first step, the arrays unbuilt, and not taken
    again on the arrays where the model declined."""

    solve: Callable[..., SolveOutcome]
    extra: tuple[str, ...] = ()
    options_refused: str = ""

    def __call__(self, model: MilpModel, s: Settings) -> tuple[SolveOutcome, float]:
        """The outcome on the model's arrays and the seconds spent building them, within s.time_limit_s."""
        # by its method, not isinstance: a runtime protocol's check costs ~7 us a call
        decoupled = getattr(model, "decoupled", None) if "lp_first" in self.extra and s.lp_first else None
        if decoupled is not None and (found := decoupled()) is not None:
            return found, 0.0
        t0 = time.perf_counter()
        arrays = model.arrays()
        if decoupled is not None:  # it decided: its decoupled point is not its optimum, and LP first need not look
            arrays = replace(arrays, coupled=True)
        build_s = time.perf_counter() - t0
        extra = {name: getattr(s, name) for name in self.extra}
        if not self.options_refused:
            extra["solver_options"] = s.solver_options
        left_s = max(s.time_limit_s - build_s, 1e-3)  # the limit covers building the arrays too
        return self.solve(arrays, left_s, s.mip_gap, s.seed, **extra), build_s


@dataclass(frozen=True)
class PyomoSolver:
    """Solves the model's Pyomo form, warm-started from the model's start point, with the
    function `backend` of solvers.pyomo_backend, `solve(pyomo_model, time_limit_s, mip_gap,
    warm_start, options)`, passing `solver=` when given. pyomo_backend is imported on the first call, so
    rounds solved from arrays never load Pyomo. Every Pyomo solver takes settings.solver_options."""

    backend: str
    solver: str | None = None
    options_refused: str = ""

    def __call__(self, model: MilpModel, s: Settings) -> tuple[SolveOutcome, float]:
        """The outcome on the model's Pyomo form and the seconds spent building it, within
        s.time_limit_s; a failure, at once, when building and loading the model would not fit in
        it (`pyomo_estimate_s`)."""
        t0 = time.perf_counter()
        if (need_s := pyomo_estimate_s(model)) > s.time_limit_s:
            return SolveOutcome(FAILED, None, math.nan, math.nan, 0.0,
                                f"not solved: building and loading its Pyomo model takes ~{need_s:.2g} s, more than "
                                f"the {s.time_limit_s:.2g} s left"), time.perf_counter() - t0
        from schedlab.solvers import pyomo_backend

        solve = getattr(pyomo_backend, self.backend)
        if self.solver is not None:
            solve = partial(solve, solver=self.solver)
        pm = model.pyomo()
        start = model.start()  # None where a customized model's constraints cut it off
        if start is not None:
            set_start(pm, start)
        build_s = time.perf_counter() - t0
        return solve(pm, max(s.time_limit_s - build_s, 1e-3), s.mip_gap, warm_start=start is not None,
                     options=s.solver_options), build_s


# Building a model in Pyomo and loading it into a solver, measured on 2 cores: 26-49 us per
# nonzero (goodput rounds of 512 and 2,048 GPUs), and 1.7-2.5 s to import Pyomo and APPSI.
PYOMO_S_PER_NONZERO = 50e-6
PYOMO_IMPORT_S = 2.0


def pyomo_estimate_s(model: MilpModel) -> float:
    """Seconds a Pyomo solver needs before it searches: importing Pyomo (once per process) and
    building and loading the model (by its arrays' nonzeros), so that a round whose limit cannot
    cover them answers at once (the greedy, solve_round) instead of long after its limit."""
    importing_s = 0.0 if "pyomo.environ" in sys.modules else PYOMO_IMPORT_S
    return importing_s + PYOMO_S_PER_NONZERO * model.arrays().A.nnz


class SolverEntry(Protocol):
    """A registry entry: solves a RoundModel under the round's settings, returning the outcome and
    the seconds spent building what it solved; `options_refused` is why it takes no
    settings.solver_options ("" where it takes them)."""

    @property
    def options_refused(self) -> str:
        """Why the entry takes no settings.solver_options ("" where it takes them)."""

    def __call__(self, model: MilpModel, s: Settings) -> tuple[SolveOutcome, float]:
        """The solver's outcome and the seconds spent building what it solved."""


SOLVERS: dict[str, SolverEntry] = {
    "highs": ArraySolver(solve_highs, extra=("lp_first",)),
    "cpsat": ArraySolver(solve_cpsat),
    "portfolio": ArraySolver(solve_portfolio, extra=("lp_first",),
                             options_refused="portfolio runs two solvers (highs and cpsat)"),
    "appsi_highs": PyomoSolver("solve_appsi_highs"),
    **{name: PyomoSolver("solve_legacy", name) for name in LEGACY_OPTIONS},
}


def array_solver_names() -> tuple[str, ...]:
    """The solvers that solve a model's arrays (highs, cpsat, portfolio): those an array-only model can use."""
    return tuple(n for n, e in SOLVERS.items() if isinstance(e, ArraySolver))


def solver(name: str) -> SolverEntry:
    """The registry entry of a solver name; SolverError naming the choices for an unknown one."""
    if name not in SOLVERS:
        raise SolverError(f"unknown solver {name!r}; use one of {', '.join(SOLVERS)}")
    return SOLVERS[name]
