"""What a formulation hands the solvers: one round's model, in two equal forms, and its decoding.

A formulation (FORMULATIONS in schedlab.formulations) maps a validated RoundInput to a
RoundModel, and `RoundModel.solve` hands it to a solver of the registry
(schedlab.solvers.registry). Solvers take a MilpModel in either form: `arrays()` for highspy and
CP-SAT, `pyomo()` for every Pyomo solver. Both forms have the same columns in the same order
(the Pyomo model lists its variables in `model.columns`), so a point from any solver decodes
the same way; a test per formulation proves the two forms are one model. Most rounds are one
MilpModel (`OneModel`); a round too large for one (a placement on thousands of GPUs) is solved
as a sequence of small ones, each by the same solver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from schedlab.solvers.arrays import MilpArrays
from schedlab.solvers.outcome import SolveOutcome
from schedlab.state import JobAllocation, RoundInput, Settings

if TYPE_CHECKING:
    import pyomo.environ as pyo


class MilpModel(Protocol):
    """What a solver of the registry solves."""

    def arrays(self) -> MilpArrays:
        """The model as arrays, with a feasible warm start in `start`."""

    def pyomo(self) -> pyo.ConcreteModel:
        """The same model in Pyomo; `model.columns` lists its variables in array column order."""

    def start(self) -> np.ndarray:
        """A feasible point to warm-start from (array layout): running jobs stay."""


Solver = Callable[[MilpModel, Settings], tuple[SolveOutcome, float]]  # a registry entry: outcome, build seconds


class RoundModel(Protocol):
    round_input: RoundInput

    def solve(self, solver: Solver, settings: Settings) -> tuple[SolveOutcome, float]:
        """The solver's outcome (a point in this model's layout) and the seconds spent building
        what it solved, within settings.time_limit_s."""

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """Concrete GPUs and batches from a point (array layout); raises RuntimeError if it does
        not decode."""

    def objective(self, values: np.ndarray) -> float:
        """The model's objective at a point (array layout)."""

    def fallback(self) -> np.ndarray:
        """A feasible point found greedily (array layout): the answer when a solver has none."""


class OneModel:
    """A round that is one MilpModel (it has arrays, pyomo and start): the solver solves it whole."""

    def solve(self, solver: Solver, settings: Settings) -> tuple[SolveOutcome, float]:
        return solver(self, settings)  # type: ignore[arg-type]
