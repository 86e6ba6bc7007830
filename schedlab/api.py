"""solve_round(): validate -> options -> build -> solve -> decode -> verify, never a traceback.

Options come from formulations.options, or, when some job opts in to layer freezing, from
formulations.freezing (the same model with freeze levels folded into the options).

Solvers, by name (one registry):
    highs        the model as arrays straight into highspy (default, fastest)
    cpsat        the same arrays in OR-Tools CP-SAT (integer-scaled objective)
    appsi_highs  the Pyomo model through Pyomo's HiGHS interface (the readable reference)
    <other>      the Pyomo model through pyo.SolverFactory(<other>): cbc, glpk, scip, gurobi...
If the solver finds no feasible point in time, fails, or its answer does not decode and
verify, the round still gets a valid greedy allocation, flagged status "fallback".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from schedlab.errors import SchedlabError
from schedlab.formulations.freezing import enumerate_freeze_options, has_freezing
from schedlab.formulations.goodput import build_arrays, build_pyomo, decode, objective_value, start_point
from schedlab.formulations.options import OptionSet, enumerate_options
from schedlab.io import parse_round_input, round_input_to_dict
from schedlab.solvers.cpsat import solve_cpsat
from schedlab.solvers.heuristics import greedy_choice
from schedlab.solvers.highs_direct import solve_highs
from schedlab.solvers.outcome import FAILED, SolveOutcome
from schedlab.solvers.pyomo_backend import set_start, solve_pyomo
from schedlab.state import RoundInput, RoundResult, Settings
from schedlab.verify import verify

FALLBACK = "fallback"


def _arrays_backend(solve: Callable) -> Callable[[OptionSet, Settings], tuple[SolveOutcome, float]]:
    def run(opts: OptionSet, s: Settings) -> tuple[SolveOutcome, float]:
        t0 = time.perf_counter()
        model = build_arrays(opts)
        build_s = time.perf_counter() - t0
        return solve(model, s.time_limit_s, s.mip_gap, s.seed), build_s
    return run


def _pyomo_backend(name: str) -> Callable[[OptionSet, Settings], tuple[SolveOutcome, float]]:
    def run(opts: OptionSet, s: Settings) -> tuple[SolveOutcome, float]:
        t0 = time.perf_counter()
        model = build_pyomo(opts)
        set_start(model, start_point(opts))
        build_s = time.perf_counter() - t0
        return solve_pyomo(model, name, s.time_limit_s, s.mip_gap, warm_start=True), build_s
    return run


SOLVERS: dict[str, Callable[[OptionSet, Settings], tuple[SolveOutcome, float]]] = {
    "highs": _arrays_backend(solve_highs),
    "cpsat": _arrays_backend(solve_cpsat),
    "appsi_highs": _pyomo_backend("appsi_highs"),
}


def _backend(name: str):
    return SOLVERS.get(name) or _pyomo_backend(name)


def _as_round_input(round_input: RoundInput | Mapping[str, Any]) -> RoundInput:
    """Dataclass inputs are validated through their JSON form: one code path for every error."""
    if isinstance(round_input, RoundInput):
        round_input = round_input_to_dict(round_input)
    return parse_round_input(round_input)


def solve_round(round_input: RoundInput | Mapping[str, Any], *, solver: str | None = None,
                time_limit_s: float | None = None, mip_gap: float | None = None) -> RoundResult:
    """Allocate GPUs and batch sizes to every job of one round.

    `round_input` is a RoundInput or its JSON dict (schema: schedlab/schemas). Keyword
    arguments override the input's settings. Raises InputError for bad input; otherwise
    always returns a verified allocation.
    """
    ri = _as_round_input(round_input)
    overrides = {k: v for k, v in {"solver": solver, "time_limit_s": time_limit_s, "mip_gap": mip_gap}.items()
                 if v is not None}
    if overrides:
        ri = replace(ri, settings=replace(ri.settings, **overrides))
    s = ri.settings
    t0 = time.perf_counter()
    opts = enumerate_freeze_options(ri) if has_freezing(ri) else enumerate_options(ri)
    options_s = time.perf_counter() - t0
    try:
        outcome, build_s = _backend(s.solver)(opts, s)
    except SchedlabError:
        raise
    except Exception as exc:  # a crashing solver must not take the caller down
        outcome, build_s = SolveOutcome(FAILED, None, math.nan, math.nan, 0.0, f"{type(exc).__name__}: {exc}"), 0.0
    build_s += options_s

    if outcome.values is not None:
        chosen = np.asarray(outcome.values[: opts.num_options]) > 0.5
        try:
            allocations = decode(opts, chosen)
            verify(ri, allocations)
            return RoundResult(allocations, outcome.status, s.solver, objective_value(opts, chosen), outcome.bound,
                               outcome.gap, build_s, outcome.solve_s, True, outcome.message)
        except (RuntimeError, SchedlabError) as exc:
            outcome = replace(outcome, message=f"solver answer rejected: {exc}")
    chosen = greedy_choice(opts)
    allocations = decode(opts, chosen)
    verify(ri, allocations)
    return RoundResult(allocations, FALLBACK, s.solver, objective_value(opts, chosen), math.nan, math.inf,
                       build_s, outcome.solve_s, True, f"greedy fallback: {outcome.message}")

