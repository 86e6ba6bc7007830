"""What every solver backend returns."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

OPTIMAL, TIME_LIMIT, FAILED = "optimal", "time_limit", "failed"


@dataclass(frozen=True)
class SolveOutcome:
    """status: optimal | time_limit (feasible incumbent, not proven) | failed (no usable point).

    `values` is the point found (the array columns, or for Pyomo the x columns then the rest),
    None when failed. Objective and bound are in the model's own (maximization) units.
    """

    status: str
    values: np.ndarray | None
    objective: float
    bound: float
    solve_s: float
    message: str = ""

    @property
    def gap(self) -> float:
        if self.values is None or not math.isfinite(self.bound):
            return math.inf
        return abs(self.bound - self.objective) / max(abs(self.objective), 1e-9)


class StopSignal:
    """Lets a solver running in one thread stop another's search: each solver registers how to
    stop it (`on_stop`) before it starts; `stop()` calls them all, and any registered after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False
        self._hooks: list[Callable[[], None]] = []

    def on_stop(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if not self._stopped:
                self._hooks.append(hook)
                return
        hook()

    def stop(self) -> None:
        with self._lock:
            self._stopped, hooks = True, list(self._hooks)
        for hook in hooks:
            hook()
