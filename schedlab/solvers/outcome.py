"""What every solver backend returns."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import replace

from schedlab.milp import OPTIMAL, TIME_LIMIT, MilpArrays, SolveOutcome

__all__ = ["StopSignal", "best_of", "start_outcome", "tightest_bound"]


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
