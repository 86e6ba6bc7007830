"""What a formulation hands the solvers: one round's model, in two equal forms, and its decoding.

A formulation (FORMULATIONS in schedlab.formulations) maps a validated RoundInput to a
RoundModel. Solvers (schedlab.solvers.registry) take either form: `arrays()` for highspy and
CP-SAT, `pyomo()` for every Pyomo solver. Both forms have the same columns in the same order
(the Pyomo model lists its variables in `model.columns`), so a point from any solver decodes
the same way; a test per formulation proves the two forms are one model.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pyomo.environ as pyo

from schedlab.solvers.arrays import MilpArrays
from schedlab.state import JobAllocation, RoundInput


class RoundModel(Protocol):
    round_input: RoundInput

    def arrays(self) -> MilpArrays:
        """The model as arrays, with a feasible warm start in `start`."""

    def pyomo(self) -> pyo.ConcreteModel:
        """The same model in Pyomo; `model.columns` lists its variables in array column order."""

    def start(self) -> np.ndarray:
        """A feasible point to warm-start from (array layout): running jobs stay."""

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """Concrete GPUs and batches from a point (array layout); raises RuntimeError if it does
        not decode."""

    def objective(self, values: np.ndarray) -> float:
        """The model's objective at a point (array layout)."""

    def fallback(self) -> np.ndarray:
        """A feasible point found greedily (array layout): the answer when a solver has none."""
