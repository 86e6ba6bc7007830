"""What every solver backend returns."""

from __future__ import annotations

import math
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
