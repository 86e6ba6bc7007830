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
from dataclasses import dataclass
from functools import cached_property
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
    @property
    def round_input(self) -> RoundInput: ...

    def solve(self, solver: Solver, settings: Settings) -> tuple[SolveOutcome, float]:
        """The solver's outcome (a point in this model's layout) and the seconds spent building
        what it solved, within settings.time_limit_s."""

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """Concrete GPUs and batches from a point (array layout); raises DecodeError if it does
        not decode."""

    def objective(self, values: np.ndarray) -> float:
        """The model's objective at a point (array layout)."""

    def fallback(self) -> np.ndarray:
        """A feasible point found greedily (array layout): the answer when a solver has none."""


class OneRoundModel(RoundModel, MilpModel, Protocol):
    """A round that is one MilpModel: what a customization changes (CustomizedModel)."""


class OneModel:
    """A round that is one MilpModel (it has arrays, pyomo and start): the solver solves it whole."""

    def solve(self, solver: Solver, settings: Settings) -> tuple[SolveOutcome, float]:
        return solver(self, settings)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CustomizedModel(OneModel):
    """A round's model with the caller's change (`customize`) applied to its Pyomo form: the
    change may add constraints, variables or objective terms. Solved by Pyomo solvers only;
    decode reads model.columns as before, the objective is the changed model's, and the warm
    start is offered only where it satisfies the changed model. The greedy fallback knows
    nothing of the change (solve_round still verifies it against the round's rules)."""

    inner: OneRoundModel
    customize: Callable[[pyo.ConcreteModel], object]

    @property
    def round_input(self) -> RoundInput:
        return self.inner.round_input

    @cached_property
    def _pyomo(self) -> pyo.ConcreteModel:
        m = self.inner.pyomo()
        self.customize(m)
        return m

    def pyomo(self) -> pyo.ConcreteModel:
        return self._pyomo

    def start(self) -> np.ndarray | None:
        start = self.inner.start()
        return start if _satisfies(self._pyomo, start) else None

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        return self.inner.decode(values)

    def objective(self, values: np.ndarray) -> float:
        import pyomo.environ as pyo

        _load(self._pyomo, values)
        return float(pyo.value(self._pyomo.obj))

    def fallback(self) -> np.ndarray:
        return self.inner.fallback()


def _load(m: pyo.ConcreteModel, values: np.ndarray) -> None:
    for v, value in zip(m.columns, values):
        v.set_value(float(value), skip_validation=True)


def _satisfies(m: pyo.ConcreteModel, point: np.ndarray, tol: float = 1e-9) -> bool:
    """Whether `point` (model.columns, other variables unset) meets every active constraint."""
    import pyomo.environ as pyo

    _load(m, point)
    for con in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(con.body, exception=False)
        if body is None or con.has_lb() and body < pyo.value(con.lower) - tol \
                or con.has_ub() and body > pyo.value(con.upper) + tol:
            return False
    return True
