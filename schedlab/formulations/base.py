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
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from schedlab.errors import InputError
from schedlab.milp import MilpArrays, OneModel, OneRoundModel, set_start
from schedlab.state import JobAllocation, RoundInput

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["CustomizedModel", "compile_arrays"]


@dataclass(frozen=True)
class CustomizedModel(OneModel):
    """A round's model with the caller's change (`customize`) applied to its Pyomo form: the
    change may add constraints, variables or objective terms. Pyomo solvers solve that model;
    the array solvers its arrays, compiled by Pyomo's standard-form compiler with model.columns
    first (so the point decodes as before) and any new variable after them. The objective is the
    changed model's, and the warm start is offered only where it satisfies the changed model.
    The greedy fallback knows nothing of the change (solve_round still verifies it against the
    round's rules)."""

    inner: OneRoundModel
    customize: Callable[[pyo.ConcreteModel], object]

    @property
    def round_input(self) -> RoundInput:
        """The round of the unchanged model."""
        return self.inner.round_input

    @cached_property
    def _pyomo(self) -> pyo.ConcreteModel:
        m = self.inner.pyomo()
        self.customize(m)
        return m

    def pyomo(self) -> pyo.ConcreteModel:
        """The changed Pyomo model (built and changed once)."""
        return self._pyomo

    @cached_property
    def _compiled(self) -> tuple[MilpArrays, list]:
        return compile_arrays(self._pyomo, self.inner.arrays())

    def arrays(self) -> MilpArrays:
        """The changed model as arrays (`compile_arrays`): model.columns first, new variables after."""
        return self._compiled[0]

    def start(self) -> np.ndarray | None:
        """The unchanged model's start where it satisfies the changed model, else None."""
        start = self.inner.start()
        return start if start is not None and _satisfies(self._pyomo, start) else None

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """The unchanged model's decoding: allocations follow from model.columns alone."""
        return self.inner.decode(values)

    def objective(self, values: np.ndarray) -> float:
        """The changed model's objective at a solver's point: model.columns, then (from the array
        solvers) the new variables; a Pyomo solver's values of those are in the model already.
        At the greedy fallback's point, which sets no new variable, the unchanged model's."""
        import pyomo.environ as pyo

        if len(values) < len(self._pyomo.columns):
            return self.inner.objective(values)
        layout = self._compiled[1] if len(values) > len(self._pyomo.columns) else self._pyomo.columns
        for v, value in zip(layout, values):
            v.set_value(float(value), skip_validation=True)
        return float(pyo.value(next(self._pyomo.component_data_objects(pyo.Objective, active=True))))

    def fallback(self) -> np.ndarray:
        """The unchanged model's greedy point (solve_round verifies it against the round's rules)."""
        return self.inner.fallback()


def compile_arrays(m: pyo.ConcreteModel, base: MilpArrays) -> tuple[MilpArrays, list]:
    """A Pyomo model as MilpArrays (and the variables of its columns): model.columns first, in
    order, then the model's other variables. `base`, the unchanged model's arrays, gives each
    column's job (choice) and the warm start, kept where it still satisfies every row."""
    import pyomo.environ as pyo
    from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

    info = LinearStandardFormCompiler().write(m)  # min c x + c0 s.t. A x <= rhs
    if info.c.shape[0] != 1:
        raise InputError([f"customize: the model needs one active objective, it has {info.c.shape[0]}"])
    ours = list(m.columns)
    known = {id(v) for v in ours}
    layout = ours + [v for v in info.columns if id(v) not in known]
    where = {id(v): i for i, v in enumerate(info.columns)}
    present = [i for i, v in enumerate(layout) if id(v) in where]
    pick = sp.csc_matrix((np.ones(len(present)), ([where[id(layout[i])] for i in present], present)),
                         shape=(len(info.columns), len(layout)))  # compiled column -> layout column
    sign = -1.0 if info.objectives[0].sense == pyo.maximize else 1.0
    fixed = [v.fixed for v in layout]
    col_lo = np.array([v.value if f else -np.inf if v.lb is None else v.lb for v, f in zip(layout, fixed)], dtype=float)
    col_hi = np.array([v.value if f else np.inf if v.ub is None else v.ub for v, f in zip(layout, fixed)], dtype=float)
    extra = len(layout) - len(ours)
    choice = None if base.choice is None else np.concatenate([base.choice, np.full(extra, -1)])
    arrays = MilpArrays(sign * np.asarray((sp.csr_matrix(info.c) @ pick).todense()).ravel(), sign * float(info.c_offset[0]),
                        sp.csr_matrix(sp.csr_matrix(info.A) @ pick), np.full(len(info.rhs), -np.inf),
                        np.asarray(info.rhs, dtype=float), col_lo, col_hi,
                        np.array([v.is_integer() for v in layout], dtype=bool), None, choice)
    if base.start is not None:
        start = np.concatenate([base.start, np.zeros(extra)])
        if arrays.max_violation(start) <= 1e-9:
            arrays = replace(arrays, start=start)
    return arrays, layout


def _satisfies(m: pyo.ConcreteModel, point: np.ndarray, tol: float = 1e-9) -> bool:
    """Whether `point` (model.columns, other variables unset) meets every active constraint."""
    import pyomo.environ as pyo

    set_start(m, point)
    for con in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(con.body, exception=False)
        if body is None or con.has_lb() and body < pyo.value(con.lower) - tol \
                or con.has_ub() and body > pyo.value(con.upper) + tol:
            return False
    return True
