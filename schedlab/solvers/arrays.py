"""A MILP as arrays: the exchange format between formulations and the array solvers.

    maximize    c @ v + offset
    subject to  row_lo <= A @ v <= row_hi,   col_lo <= v <= col_hi,   v_i integer where integer[i]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class MilpArrays:
    c: np.ndarray
    offset: float
    A: sp.csr_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integer: np.ndarray
    start: np.ndarray | None = None  # a feasible point to warm-start from, if known
    choice: np.ndarray | None = None  # the job each column belongs to (-1: none); None: each its own

    @property
    def num_cols(self) -> int:
        return len(self.c)

    @property
    def num_rows(self) -> int:
        return self.A.shape[0]

    def objective(self, v: np.ndarray) -> float:
        return float(self.c @ v + self.offset)

    def max_violation(self, v: np.ndarray) -> float:
        """Largest violation of any row or column bound by point v (0 when feasible)."""
        av = self.A @ v
        parts = [self.row_lo - av, av - self.row_hi, self.col_lo - v, v - self.col_hi, [0.0]]
        return float(max(np.max(p) for p in parts if len(p)))
