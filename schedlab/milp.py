"""The model types, on the ground floor: what formulations build and solvers solve.

Formulations (schedlab.formulations) build a round's model; solvers (schedlab.solvers) solve
it; neither imports the other, and both import this module. It holds:

- `MilpArrays`, a MILP as arrays (the exchange format with highspy and CP-SAT)::

      maximize    c @ v + offset
      subject to  row_lo <= A @ v <= row_hi,   col_lo <= v <= col_hi,   v_i integer where integer[i]

- `Rows`, the one builder of sparse constraint rows that every formulation uses, one block per
  tagged constraint of its docstring;
- `SolveOutcome`, what every solver returns;
- the protocols `MilpModel` (what a solver solves, as arrays or as Pyomo), `Solver` (a registry
  entry) and `RoundModel` (a round's model: solve, decode, objective, fallback), with `OneModel`,
  the base of a round that is one MilpModel;
- `set_start`, which loads a point in the array layout into the model's Pyomo form;
- `build_deadline` and `check_build_deadline`: the time a round's model must be built by, which
  a formulation's enumerations that can grow exponentially check (`BuildTimeout`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import scipy.sparse as sp

from schedlab.state import JobAllocation, RoundInput, Settings, Status

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["FAILED", "OPTIMAL", "TIME_LIMIT", "BuildTimeout", "Decouples", "MilpArrays", "MilpModel", "OneModel", "OneRoundModel",
           "RoundModel", "Rows", "SolveOutcome", "Solver", "build_deadline", "check_build_deadline", "one_row_choice",
           "set_start", "stack_rows"]

OPTIMAL, TIME_LIMIT, FAILED = Status.OPTIMAL, Status.TIME_LIMIT, Status.FAILED


class BuildTimeout(Exception):
    """A round's model was not built by its deadline (`build_deadline`); solve_round answers
    without it. Not a SchedlabError: it never reaches a caller."""


_BUILD_DEADLINE: ContextVar[float] = ContextVar("build_deadline", default=math.inf)


@contextmanager
def build_deadline(at_s: float) -> Iterator[None]:
    """The models built in the block must be built by `at_s` (a time.perf_counter() reading):
    solve_round's time limit, which bounds the whole round. Outside such a block none is."""
    token = _BUILD_DEADLINE.set(at_s)
    try:
        yield
    finally:
        _BUILD_DEADLINE.reset(token)


def check_build_deadline(what: str) -> None:
    """Raise BuildTimeout, naming `what` was being built, where the build's deadline has passed."""
    if time.perf_counter() > _BUILD_DEADLINE.get():
        raise BuildTimeout(what)


@dataclass(frozen=True)
class MilpArrays:
    """A MILP as arrays: maximize ``c @ v + offset`` subject to ``row_lo <= A @ v <= row_hi``,
    ``col_lo <= v <= col_hi`` and ``v[i]`` integer where ``integer[i]``.

    `start` is a feasible point to warm-start from, if known; `choice` gives the unit each column
    belongs to, which a search frees or fixes together: the job of an option's column, or
    another unit of the model (e.g. a pool's packing columns), -1 for none (free whenever any
    unit is); None when every column is its own.

    `defer` marks columns (at lower bound 0) that an LP optimum seldom uses: the relaxation may
    leave them out and price them in (column generation, solvers.highs_direct), None for none.
    `least_dual_rows` are blocks of equality rows with a zero right-hand side that only deferred
    columns make nonzero: while those are out, the columns left in them sit at 0 and the rows'
    duals are free. The solver sets them, block by block, to the least values that keep those
    columns dual feasible, the prices at which deferred columns with negative coefficients in
    them look best. A column meets a block in one row at most.

    `one_rows` are rows "at most one of these binary columns" (a job's choice of options), no
    column in two of them, None for none: a solver may answer at once where each taking its best
    column meets every other row (solvers.outcome.decoupled_optimum), and with `crash` its
    relaxation starts from the basis in which each takes its best column (solvers.highs_direct).
    `coupled` says that its model has shown those best columns not to be its optimum
    (milp.Decouples), so that decoupled_optimum need not look.
    `scaled` False asks for the relaxation without the solver's scaling, where the formulation
    measured it to slow the simplex.
    """

    c: np.ndarray
    offset: float
    A: sp.csr_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integer: np.ndarray
    start: np.ndarray | None = None
    choice: np.ndarray | None = None
    defer: np.ndarray | None = None
    least_dual_rows: tuple[np.ndarray, ...] = ()
    one_rows: np.ndarray | None = None
    crash: bool = False
    scaled: bool = True
    coupled: bool = False

    @property
    def num_cols(self) -> int:
        """The number of columns (variables)."""
        return len(self.c)

    @property
    def num_rows(self) -> int:
        """The number of rows (constraints)."""
        return self.A.shape[0]

    def objective(self, v: np.ndarray) -> float:
        """The objective ``c @ v + offset`` at point `v`."""
        return float(self.c @ v + self.offset)

    def one_row_entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The nonzeros of `one_rows`, row by row: (position in one_rows, column, value), read off
        the CSR arrays (scipy's A[rows] took 0.16 ms of a 0.18 ms check on a 100-job round)."""
        assert self.one_rows is not None
        rows, A = self.one_rows, self.A
        # steps by slicing, not np.diff: this runs for nearly every round
        if len(rows) and rows[-1] - rows[0] == len(rows) - 1 and (rows[1:] - rows[:-1] == 1).all():  # a range of rows
            bounds = A.indptr[rows[0]: rows[-1] + 2]
            at: slice | np.ndarray = slice(bounds[0], bounds[-1])
            counts = bounds[1:] - bounds[:-1]
        else:
            starts, counts = A.indptr[rows], A.indptr[rows + 1] - A.indptr[rows]
            at = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts - starts, counts)
        return np.repeat(np.arange(len(rows)), counts), A.indices[at], A.data[at]

    def max_violation(self, v: np.ndarray) -> float:
        """Largest violation of any row or column bound by point `v` (0 when feasible)."""
        av = self.A @ v
        parts = [self.row_lo - av, av - self.row_hi, self.col_lo - v, v - self.col_hi, [0.0]]
        return float(max(np.max(p) for p in parts if len(p)))


@dataclass
class Rows:
    """The rows of one tagged constraint: each row's index key, its COO entries (rows numbered
    within the block) and its bounds. A formulation fills one block per tag of its docstring;
    `stack_rows` joins them into a matrix, and a Pyomo twin may read the keys to name rows.

    Examples
    --------
    >>> one = Rows()
    >>> one.add(("a",), cols=[0, 1], vals=1.0, lo=-math.inf, hi=1.0)
    >>> A, lo, hi = stack_rows([one], num_cols=2)
    >>> A.toarray().tolist(), hi.tolist()
    ([[1.0, 1.0]], [1.0])
    """

    keys: list[tuple] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)
    cols: list[np.ndarray] = field(default_factory=list)
    vals: list[np.ndarray] = field(default_factory=list)
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: tuple, cols: Sequence[int] | np.ndarray, vals: float | Sequence[float] | np.ndarray,
            lo: float, hi: float) -> None:
        """One row: ``lo <= sum_i vals[i] * v[cols[i]] <= hi`` (a scalar `vals` applies to every column)."""
        cols = np.asarray(cols, dtype=int)
        vals = np.asarray(vals, dtype=float)
        self.rows.append(np.full(len(cols), len(self.keys)))
        self.cols.append(cols)
        # broadcast only where needed: np.broadcast_to costs ~2 us, and every round adds rows
        self.vals.append(vals if vals.shape == cols.shape else np.broadcast_to(vals, cols.shape))
        self.keys.append(key)
        self.lo.append(lo)
        self.hi.append(hi)

    def add_dict(self, key: tuple, coefficients: dict[int, float], lo: float, hi: float) -> None:
        """One row given as {column: coefficient}."""
        self.add(key, list(coefficients), list(coefficients.values()), lo, hi)

    def extend(self, keys: list[tuple], rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, lo: float,
               hi: float | Sequence[float] | np.ndarray) -> None:
        """Many rows at once: `rows` numbers them 0..len(keys)-1; `hi` is one bound or one per row."""
        self.rows.append(np.asarray(rows, dtype=int) + len(self.keys))
        self.cols.append(np.asarray(cols, dtype=int))
        self.vals.append(np.asarray(vals, dtype=float))
        self.keys += keys
        self.lo += [lo] * len(keys)
        self.hi += np.broadcast_to(np.asarray(hi, dtype=float), (len(keys),)).tolist()


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts, dtype=dtype) if parts else np.zeros(0, dtype)


def stack_rows(blocks: Sequence[Rows], num_cols: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """The blocks one under the other: the constraint matrix and its row bounds (lo, hi)."""
    rows, offset = [], 0
    for block in blocks:  # every part joined once (not each block's first, then the blocks)
        rows += [r + offset for r in block.rows]
        offset += len(block)
    cols, vals = [c for b in blocks for c in b.cols], [v for b in blocks for v in b.vals]
    lo = np.array([x for b in blocks for x in b.lo], dtype=float)
    hi = np.array([x for b in blocks for x in b.hi], dtype=float)
    return _csr(_cat(rows, int), _cat(cols, int), _cat(vals, float), (offset, num_cols)), lo, hi


# Up to this many nonzeros a matrix is sorted into CSR here: scipy's COO conversion costs ~45 us
# of checks on a small round's matrix (a tenth of a 7-job round's arrays), ~10 us this way; above
# it scipy's linear-time conversion wins over the sort.
_SORTED_CSR_MAX_NNZ = 4096


def _csr(row: np.ndarray, col: np.ndarray, val: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """The CSR matrix of the triplets, entries of one (row, column) summed, each row's columns
    in increasing order: scipy's canonical form, as sp.csr_matrix((val, (row, col))) gives."""
    if len(row) > _SORTED_CSR_MAX_NNZ:
        return sp.csr_matrix((val, (row, col)), shape=shape)
    if len(col) and not 0 <= col.min() <= col.max() < shape[1]:  # scipy's own check, which the CSR arrays skip
        raise ValueError(f"column index out of range [0, {shape[1]})")
    key = row.astype(np.int64) * shape[1] + col
    order = np.argsort(key, kind="stable")
    indptr = np.zeros(shape[0] + 1, dtype=np.int32)
    np.cumsum(np.bincount(row, minlength=shape[0]), out=indptr[1:])
    A = sp.csr_matrix((val[order], col[order].astype(np.int32), indptr), shape=shape)
    sorted_key = key[order]
    if (sorted_key[1:] != sorted_key[:-1]).all():
        A.has_canonical_format = True  # sorted and no entry twice: scipy's own scan for it is skipped
    else:
        A.sum_duplicates()
    return A


@dataclass(frozen=True)
class SolveOutcome:
    """What every solver returns.

    status: optimal | time_limit (a feasible incumbent, not proven) | failed (no usable point).
    `values` is the point found (the array columns, or for Pyomo the x columns then the rest),
    None when failed. Objective and bound are in the model's own (maximization) units.
    """

    status: Status
    values: np.ndarray | None
    objective: float
    bound: float
    solve_s: float
    message: str = ""

    @property
    def gap(self) -> float:
        """Relative distance of the objective from the bound (inf without a point or a bound)."""
        if self.values is None or not math.isfinite(self.bound):
            return math.inf
        return abs(self.bound - self.objective) / max(abs(self.objective), 1e-9)


class MilpModel(Protocol):
    """What a solver of the registry solves."""

    def arrays(self) -> MilpArrays:
        """The model as arrays, with a feasible warm start in `start`."""

    def pyomo(self) -> pyo.ConcreteModel:
        """The same model in Pyomo; `model.columns` lists its variables in array column order."""

    def start(self) -> np.ndarray | None:
        """A feasible point to warm-start from (array layout), if known."""


class Decouples(Protocol):
    """A model that decides, without building its arrays, whether its decoupled point is its
    optimum (solvers.outcome.decoupled_optimum: each one-of row at its own best column, the
    rows that couple them holding): a round of a few jobs on a large cluster is one, and its
    arrays were a quarter of it."""

    def decoupled(self) -> SolveOutcome | None:
        """That point where it is the optimum (OPTIMAL, its objective as its bound), the one
        decoupled_optimum finds on the arrays wherever that check answers; None where it is not."""


Solver = Callable[[MilpModel, Settings], tuple[SolveOutcome, float]]  # a registry entry: outcome, build seconds


class RoundModel(Protocol):
    """A round's model, as a formulation builds it (schedlab.formulations.FORMULATIONS)."""

    @property
    def round_input(self) -> RoundInput:
        """The round this model was built from."""

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
    """A round that is one MilpModel: what a customization changes."""


class OneModel:
    """Base of a round that is one MilpModel (it has arrays, pyomo and start): the solver solves it whole."""

    def solve(self, solver: Solver, settings: Settings) -> tuple[SolveOutcome, float]:
        """The solver's outcome on this model and the seconds it spent building it."""
        return solver(self, settings)  # type: ignore[arg-type]


def one_row_choice(row: np.ndarray, worth: np.ndarray, num_rows: int) -> np.ndarray:
    """The entries one-of rows take each on its own: in every row, the first entry of its largest
    worth where that worth is positive (none in a row without one). `row` numbers each entry's row
    (0..num_rows-1), the entries row by row; returns their positions, a row's at most one.

    Examples
    --------
    >>> one_row_choice(np.array([0, 0, 0, 1, 2, 2]), np.array([1.0, 3.0, 3.0, -1.0, np.inf, 2.0]), 3).tolist()
    [1, 4]
    """
    best = np.full(num_rows, -np.inf)
    np.maximum.at(best, row, worth)
    hit = np.flatnonzero((worth == best[row]) & (worth > 0))
    first = np.ones(len(hit), dtype=bool)
    first[1:] = row[hit][1:] != row[hit][:-1]
    return hit[first]


def set_start(model: pyo.ConcreteModel, start: np.ndarray) -> None:
    """Load a point given in the array layout (the order of `model.columns`) into a Pyomo model."""
    for v, value in zip(model.columns, start):
        v.set_value(float(value), skip_validation=True)
