"""What every solver backend returns."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from schedlab.milp import OPTIMAL, TIME_LIMIT, MilpArrays, SolveOutcome, one_row_choice

__all__ = ["StopSignal", "best_of", "decoupled_optimum", "start_outcome", "tightest_bound"]


class StopSignal:
    """Lets a solver running in one thread stop another's search: each solver registers how to
    stop it (`on_stop`) before it starts; `stop()` calls them all, and any registered after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False
        self._hooks: list[Callable[[], None]] = []

    def on_stop(self, hook: Callable[[], None]) -> None:
        """Register how to stop a search; called at once if the signal was already given."""
        with self._lock:
            if not self._stopped:
                self._hooks.append(hook)
                return
        hook()

    def stop(self) -> None:
        """Stop every registered search (thread-safe; later registrations are stopped at once)."""
        with self._lock:
            self._stopped, hooks = True, list(self._hooks)
        for hook in hooks:
            hook()

    @property
    def stopped(self) -> bool:
        """Whether the signal was given: a search that has not begun need not begin."""
        return self._stopped


def best_of(outcomes: tuple[SolveOutcome, ...], mip_gap: float) -> SolveOutcome:
    """The best point of several solves of one model, bounded by the tightest of their bounds."""
    found = [o for o in outcomes if o.values is not None]
    if not found:
        return outcomes[-1]
    best = max(found, key=lambda o: o.objective)
    bound = tightest_bound(outcomes)
    gap = (bound - best.objective) / max(abs(best.objective), 1e-9)
    # one solver's proof covers the best point too (it is at least as good); at mip_gap 0 the two
    # solvers' tolerances can leave the bounds a hair apart, which is no reason to call it unproven
    proven = any(o.status == OPTIMAL for o in found) or gap <= mip_gap
    return replace(best, status=OPTIMAL if proven else TIME_LIMIT, bound=bound,
                   message="; ".join(o.message for o in outcomes))


def tightest_bound(outcomes: tuple[SolveOutcome, ...]) -> float:
    """The smallest bound of several searches of one model (inf where none has one). Every
    search's bound holds, a point found or not: LP first's relaxation bounds the model even
    where no neighbourhood found a point, and a MIP stopped early may report none."""
    return min((o.bound for o in outcomes if not math.isnan(o.bound)), default=math.inf)


def start_outcome(model: MilpArrays, found: SolveOutcome, solve_s: float) -> SolveOutcome:
    """Out of time with no point of its own: the model's warm start, unproven, if it has one,
    with the bound of the search so far (e.g. its LP relaxation's)."""
    if model.start is None:
        return replace(found, solve_s=solve_s)
    return SolveOutcome(TIME_LIMIT, model.start, model.objective(model.start), tightest_bound((found,)), solve_s,
                        f"time limit reached ({found.message}): the warm start")


def decoupled_optimum(model: MilpArrays) -> SolveOutcome | None:
    """The optimum of a model whose coupling rows do not bind, found without a search; None for
    any other model.

    Drop every row but the one-of rows (MilpArrays.one_rows) and the model falls apart: each such
    row takes its best column (the one fixed at 1 if it has one, else the largest positive
    coefficient, else none), and every other column the bound its coefficient prefers (with
    coefficient 0, its value in the model's start, else its lower bound). That point's objective
    bounds every point of the model, so where it meets every row as well it is optimal, with
    that bound: the LP relaxation's too, which lies between the two. A round of a few jobs on a
    large cluster is one (days 55-62 of the Philly trace on 2,048 GPUs: 11,146 of 11,488 rounds),
    and the relaxation it saves cost more than the rest of its solve. A model that finds this
    point without its arrays (milp.Decouples, the goodput model) is asked first by the LP-first
    solvers (solvers.registry.ArraySolver), and where it declines its arrays say so
    (MilpArrays.coupled)."""
    if model.one_rows is None or model.coupled or not model.num_cols:
        return None
    t0 = time.perf_counter()
    row, col, data = model.one_row_entries()
    if (data != 1.0).any() or (model.row_hi[model.one_rows] != 1.0).any() or (model.col_hi[col] > 1.0).any():
        return None  # not rows "at most one of these binary columns"
    v = np.where(model.c > 0, model.col_hi, model.col_lo)
    aux = model.c == 0
    if model.start is not None:
        v[aux] = model.start[aux]
    v[col] = model.col_lo[col]
    # each row's choice: a column fixed at 1, else its best positive coefficient (the first of
    # equals) among the columns not fixed at 0, else none
    worth = np.where(model.col_lo[col] > 0, np.inf, np.where(model.col_hi[col] >= 1.0, model.c[col], -np.inf))
    v[col[one_row_choice(row, worth, len(model.one_rows))]] = 1.0
    if not np.isfinite(v).all() or (model.integer & (v != np.round(v))).any():
        return None
    activity = model.A @ v
    tol = 1e-9 * np.maximum(1.0, np.abs(activity))
    if ((activity < model.row_lo - tol) | (activity > model.row_hi + tol)).any():
        return None
    objective = model.objective(v)
    return SolveOutcome(OPTIMAL, v, objective, objective, time.perf_counter() - t0,
                        "decoupled: each job's best option, and the rows that couple them hold")

