"""solve_round(): validate -> formulate -> build -> solve -> decode -> verify, never a traceback.

The round's `settings.formulation` names its model in formulations.FORMULATIONS (goodput,
joint, placement) and `settings.solver` the solver in solvers.registry.SOLVERS (highs, cpsat,
appsi_highs, cbc, glpk, ...): any formulation with any solver. If the solver finds no feasible
point in time, fails, or its answer does not decode and verify, the round still gets a valid
greedy allocation, flagged status "fallback".
"""

from __future__ import annotations

import functools
import gc
import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from schedlab.errors import DecodeError, InputError, SchedlabError, VerificationError
from schedlab.formulations import FORMULATIONS
from schedlab.formulations.base import CustomizedModel
from schedlab.io import parse_round_input
from schedlab.milp import FAILED, BuildTimeout, OneRoundModel, RoundModel, SolveOutcome, build_deadline
from schedlab.partition import auto_partitions, solve_partitioned
from schedlab.solvers.highs_direct import lp_bound
from schedlab.solvers.registry import solver as get_solver
from schedlab.state import RoundInput, RoundResult, Status
from schedlab.verify import verify

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["build_model", "solve_round"]

FALLBACK = Status.FALLBACK


def solve_round(round_input: RoundInput | Mapping[str, Any], *, solver: str | None = None,
                time_limit_s: float | None = None, mip_gap: float | None = None,
                formulation: str | None = None, partitions: int | None = None,
                solver_options: Mapping[str, Any] | None = None, executor: Executor | None = None,
                customize: Callable[[pyo.ConcreteModel], object] | None = None) -> RoundResult:
    """Allocate GPUs and batch sizes to every job of one round.

    `round_input` is a RoundInput or its JSON dict (schema: schedlab/schemas). Keyword
    arguments override the input's settings. A round split into parts (settings.partitions,
    schedlab.partition) solves them on `executor` (e.g. Dask's client.get_executor()), else on
    local processes. Raises InputError for bad input; otherwise always returns a verified
    allocation. settings.time_limit_s bounds the whole call, parsing and model building
    included: the solver gets what is left of it, and an answer it has not proven optimal is
    never below the formulation's greedy (the greedy is the answer then, status fallback). A
    model not built within it (joint's, on nodes of many GPUs in many tiers) gives way to the
    goodput round's greedy, flagged fallback, objective NaN (`_unbuilt`).

    `customize(model)` changes the round's Pyomo model (build_model's) before any solver solves
    it (the array solvers its compiled arrays): add constraints, variables or objective terms;
    the answer is still decoded and verified against the round's rules
    (formulations.base.CustomizedModel).

    Examples
    --------
    Two jobs on two nodes of 4 GPUs, one of them running on one GPU for 15 minutes:

    >>> import schedlab
    >>> result = schedlab.solve_round({
    ...     "cluster": {"nodes": [{"id": "n0", "gpus": 4}, {"id": "n1", "gpus": 4}]},
    ...     "jobs": [{"id": "a", "application": "cifar10", "current_gpus": [{"node": "n0", "gpu": 0}],
    ...               "age_s": 900},
    ...              {"id": "b", "application": "bert"}]})
    >>> result.status, result.verified
    ('optimal', True)
    >>> [(a.job_id, a.num_gpus, a.total_bsz) for a in result.allocations]
    [('a', 4, 140), ('b', 4, 48)]
    """
    started_s = time.perf_counter()
    collecting = gc.isenabled()
    gc.disable()  # first of all, and back on as the very last step: _COLLECTOR_OFF
    try:
        overrides = {k: v for k, v in {"solver": solver, "time_limit_s": time_limit_s, "mip_gap": mip_gap,
                                        "formulation": formulation, "partitions": partitions,
                                        "solver_options": solver_options}.items() if v is not None}
        ri = parse_round_input(round_input, overrides)  # keyword overrides are checked as the JSON's fields are
        if customize is not None:
            if auto_partitions(ri) > 1:
                raise InputError(["settings.partitions: a customized round is solved whole; set partitions to 1"])
            return _solve_validated(ri, started_s, customize)
        if (k := auto_partitions(ri)) > 1:
            left_s = ri.settings.time_limit_s - (time.perf_counter() - started_s)
            result = solve_partitioned(ri, k, _solve_validated, executor, left_s)
            verify(ri, result.allocations)
            return result
        return _solve_validated(ri, started_s)
    finally:
        if collecting:
            gc.enable()


# _COLLECTOR_OFF: Python's cyclic garbage collector is held off for the round, then restored as
# it was. A round allocates tens of thousands of objects (jobs, options, allocations) that all
# live until it ends, so the collector's passes during it traverse them again and again and free
# nothing: about a tenth of a 2,048-GPU round. It goes off before the round allocates anything and
# comes back on after its last allocation (no context manager, whose objects are allocations), so
# that no pass runs inside the round: a pass made due by the caller's allocations (a replay's or
# a benchmark's next jobs) ran at the round's first or last allocation, in 49 of 50 rounds of
# `schedlab bench --gpus 64 --jobs 100` (80-140 us of their ~4 ms; a full pass, 42 ms, in one).
# The caller's next allocation runs it, with the cycles the round leaves (allocations are still
# counted while the collector is off).


def build_model(round_input: RoundInput | Mapping[str, Any], *, formulation: str | None = None) -> pyo.ConcreteModel:
    """The round's model in Pyomo, to read, change or write.

    The formulation module's sets, parameters, variables and constraints under its docstring's
    names; goodput's x is indexed by (job id, option). Validated as solve_round validates; write
    it with `model.write("round.lp", io_options={"symbolic_solver_labels": True})`.

    Examples
    --------
    Two jobs on one node of 4 GPUs: each option names its group, nodes and GPUs.

    >>> import schedlab
    >>> m = schedlab.build_model({"cluster": {"nodes": [{"id": "n0", "gpus": 4}]},
    ...                           "jobs": [{"id": "a", "application": "cifar10"}, {"id": "b", "application": "bert"}]})
    >>> sorted(m.x)[:3]
    [('a', 'g0/1n/1gpu'), ('a', 'g0/1n/2gpu'), ('a', 'g0/1n/4gpu')]
    >>> import pyomo.environ as pyo
    >>> [c.name for c in m.component_objects(pyo.Constraint)]
    ['one', 'level', 'slots']
    """
    ri = parse_round_input(round_input, {"formulation": formulation} if formulation else None)
    return _one_model(FORMULATIONS[ri.settings.formulation](ri), ri).pyomo()


def _one_model(model: RoundModel, ri: RoundInput) -> OneRoundModel:
    """The round's model if it is one MILP (what build_model returns and customize changes)."""
    if not hasattr(model, "pyomo"):
        raise InputError([f"settings.formulation: this {ri.settings.formulation} round is solved as a sequence of "
                          "models, not one (a placement on more than 128 GPUs); build a smaller round"])
    return cast(OneRoundModel, model)


def _solve_validated(ri: RoundInput, started_s: float | None = None,
                     customize: Callable[[pyo.ConcreteModel], object] | None = None) -> RoundResult:
    """One validated round, whole: build, solve within what is left of its limit, decode, verify.

    Every answer is at least the floor: a solver's answer that is not proven optimal is compared
    with the formulation's greedy (`RoundModel.fallback`, computed then, not before: a proven
    round pays nothing for it), and the better of the two is the answer; the greedy's is flagged
    `fallback`. A round whose limit is spent before a solver can start answers the greedy at
    once. Every answer has an upper bound where one can be had in time (`_bounded`).
    """
    s = ri.settings
    t0 = time.perf_counter()
    started_s = t0 if started_s is None else started_s
    try:
        with build_deadline(started_s + s.time_limit_s):
            model = FORMULATIONS[s.formulation](ri)
    except BuildTimeout as exc:
        return _unbuilt(ri, str(exc), time.perf_counter() - t0)
    if customize is not None:
        model = CustomizedModel(_one_model(model, ri), customize)
    options_s = time.perf_counter() - t0
    left_s = s.time_limit_s - (time.perf_counter() - started_s)
    if left_s <= 0:
        outcome, build_s = SolveOutcome(FAILED, None, math.nan, math.nan, 0.0,
                                        "the time limit was spent before a solver could start"), 0.0
    else:
        try:
            outcome, build_s = model.solve(get_solver(s.solver), replace(s, time_limit_s=left_s))
        except SchedlabError:
            raise
        except Exception as exc:  # a crashing solver must not take the caller down
            outcome, build_s = SolveOutcome(FAILED, None, math.nan, math.nan, 0.0, f"{type(exc).__name__}: {exc}"), 0.0
    build_s += options_s
    greedy = functools.cache(model.fallback)  # computed once, and only for an unproven answer

    deadline_s = started_s + s.time_limit_s
    if outcome.values is not None:
        try:
            allocations = model.decode(outcome.values)
            verify(ri, allocations)
            objective = model.objective(outcome.values)
            if outcome.status == Status.OPTIMAL or objective >= model.objective(greedy()):
                return _bounded(RoundResult(allocations, outcome.status, s.solver, objective, outcome.bound, outcome.gap,
                                            build_s, outcome.solve_s, True, outcome.message, options_s), model, deadline_s)
            outcome = replace(outcome, message=f"the solver's answer ({objective:.6g}, {outcome.status}: "
                                               f"{outcome.message}) is below the greedy's")
        except (DecodeError, VerificationError) as exc:
            outcome = replace(outcome, message=f"solver answer rejected: {exc}")
    values = greedy()
    allocations = model.decode(values)
    verify(ri, allocations)
    objective = model.objective(values)
    return _bounded(RoundResult(allocations, FALLBACK, s.solver, objective, outcome.bound, _gap(outcome.bound, objective),
                                build_s, outcome.solve_s, True, f"greedy fallback: {outcome.message}", options_s),
                    model, deadline_s)


def _unbuilt(ri: RoundInput, what: str, build_s: float) -> RoundResult:
    """The answer to a round whose model was not built within its time limit (BuildTimeout: the
    joint model of nodes of many GPUs in many tiers grows exponentially): the goodput round's
    greedy, which sees every job and GPU but neither tiers nor topology, decoded and verified,
    flagged fallback, with neither objective nor bound in the round's own model (NaN)."""
    t0 = time.perf_counter()
    floor = FORMULATIONS["goodput"](replace(ri, settings=replace(ri.settings, formulation="goodput")))
    allocations = floor.decode(floor.fallback())
    verify(ri, allocations)
    return RoundResult(allocations, FALLBACK, ri.settings.solver, math.nan, math.nan, math.inf,
                       build_s + time.perf_counter() - t0, 0.0, True,
                       f"greedy fallback: the {ri.settings.formulation} model was not built within the time limit "
                       f"({what}); the goodput round's greedy answers, blind to tiers and topology: raise "
                       "settings.tier_tolerance (fewer tiers) or settings.time_limit_s", build_s, bound_timed_out=True)


def _bounded(result: RoundResult, model: RoundModel, deadline_s: float) -> RoundResult:
    """The answer with an upper bound: the solver's where it has one, else the LP relaxation of
    the round's model (solvers.highs_direct.lp_bound), solved by the round's deadline (a
    time.perf_counter() reading). Where it does not finish by then, no bound is invented: NaN,
    flagged `bound_timed_out`. A model that is not one MILP (a windowed placement) has its solver's."""
    if math.isfinite(result.bound) or not hasattr(model, "arrays"):
        return result
    bound = math.inf
    if time.perf_counter() < deadline_s:
        arrays = cast(OneRoundModel, model).arrays()
        if (left_s := deadline_s - time.perf_counter()) > 0:
            bound = lp_bound(arrays, left_s)
    if not math.isfinite(bound):
        return replace(result, bound=math.nan, gap=math.inf, bound_timed_out=True,
                       message=f"{result.message}; no bound: the LP relaxation was not solved within the time limit")
    return replace(result, bound=bound, gap=_gap(bound, result.objective),
                   message=f"{result.message}; bound: the LP relaxation")


def _gap(bound: float, objective: float) -> float:
    """The objective's distance below the bound, relative (inf without a bound)."""
    return abs(bound - objective) / max(abs(objective), 1e-9) if math.isfinite(bound) else math.inf
