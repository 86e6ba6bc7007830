"""The placement model as a round formulation, and the exact placement of a PlacementInput.

`placement_model` (FORMULATIONS["placement"]) takes a RoundInput as the module docstring of
formulations.placement says: `placement_view` turns the round into a PlacementInput (every GPU
of its cluster, every job on JobSpec.gang_gpus GPUs) and maps a placement back to allocations.
Up to EXACT_MAX_GPUS GPUs the round is one MILP (`PlacementRoundModel`); above, windows of it
(`WindowedPlacementModel`, formulations.placement_windows). Both are warm-started from PAL's
greedy (formulations.placement_greedy), which is also their fallback.

`solve_placement` and `solve_exact` solve a PlacementInput directly with a solver the caller
takes from the registry (schedlab.solvers.registry): formulations do not import solvers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from schedlab.errors import InputError
from schedlab.formulations.placement import PlacementModel, build, build_pyomo, decode, point
from schedlab.formulations.placement_greedy import pal_greedy
from schedlab.formulations.placement_problem import (
    PlacementGpu,
    PlacementInput,
    PlacementJob,
    job_speed,
    placement_objective,
)
from schedlab.formulations.placement_windows import search_windows, status, upper_bound
from schedlab.milp import FAILED, TIME_LIMIT, MilpArrays, OneModel, SolveOutcome, Solver
from schedlab.models.efficiency import submitted_fits, submitted_split
from schedlab.models.throughput import throughput
from schedlab.state import GpuRef, JobAllocation, JobSpec, RoundInput, Settings, Status

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["EXACT_MAX_GPUS", "PlacementMilp", "PlacementResult", "PlacementRoundModel", "PlacementView",
           "WindowedPlacementModel", "placement_model", "placement_view", "solve_exact", "solve_placement", "type_speeds"]


@dataclass(frozen=True)
class PlacementResult:
    """An exact placement and how it was found.

    Attributes
    ----------
    placement
        Job id -> GPU ids.
    objective
        Its worth, placement_objective's.
    status
        The solver's status (time_limit where a start stood in for a solver without a point).
    build_s, solve_s
        Seconds spent building the model and solving it.
    """

    placement: dict[str, tuple[str, ...]]
    objective: float
    status: Status
    build_s: float
    solve_s: float


EXACT_MAX_GPUS = 128  # larger placements are solved a window at a time (placement_windows)


@dataclass(frozen=True)
class PlacementMilp:
    """The exact model of a PlacementInput as the registry's solvers take it (schedlab.milp.MilpModel).

    It is warm-started from a placement: a whole round's, or one window's.
    """

    pi: PlacementInput
    model: PlacementModel
    start_placement: Mapping[str, tuple[str, ...]]

    def arrays(self) -> MilpArrays:
        """The model as arrays, the start placement's point as its warm start."""
        return replace(self.model.arrays, start=self.start())

    def pyomo(self) -> pyo.ConcreteModel:
        """The same model in Pyomo (build_pyomo)."""
        return build_pyomo(self.pi)

    def start(self) -> np.ndarray:
        """The start placement as a point of the model."""
        return point(self.pi, self.model, self.start_placement)


def solve_placement(pi: PlacementInput, solver: Solver, time_limit_s: float = 10.0, mip_gap: float = 1e-6,
                    start: Mapping[str, tuple[str, ...]] | None = None) -> PlacementResult:
    """The exact placement of `pi`, never worse than its start.

    Up to EXACT_MAX_GPUS GPUs the model is solved whole (`solve_exact`); above, one window of
    nodes at a time around the start (placement_windows), its status optimal only where the
    answer reaches placement_windows.upper_bound.

    Parameters
    ----------
    pi
        The problem; with no job, the empty placement, optimal.
    solver
        An entry of the registry (schedlab.solvers.registry).
    time_limit_s, mip_gap
        The solve's limits (the windows share the time limit).
    start
        The warm start, a placement; PAL's greedy if none given. Under a time limit the
        answer is never worse than it.
    """
    if not pi.jobs:
        return PlacementResult({}, 0.0, Status.OPTIMAL, 0.0, 0.0)
    start = start if start is not None else pal_greedy(pi, np.random.default_rng(0))
    if len(pi.gpus) <= EXACT_MAX_GPUS:
        return solve_exact(pi, solver, Settings(time_limit_s=time_limit_s, mip_gap=mip_gap), start)
    t0 = time.perf_counter()
    found = search_windows(pi, start, time_limit_s, lambda sub, left_s, sub_start: solve_exact(
        sub, solver, Settings(time_limit_s=left_s, mip_gap=mip_gap), sub_start).placement)
    objective = placement_objective(pi, found.placement)
    return PlacementResult(found.placement, objective, status(upper_bound(pi), objective, mip_gap), 0.0,
                           time.perf_counter() - t0)


def solve_exact(pi: PlacementInput, solver: Solver, settings: Settings,
                start: Mapping[str, tuple[str, ...]]) -> PlacementResult:
    """The exact model of `pi` solved whole by a registry entry, warm-started from `start`.

    The time limit, settings.time_limit_s, includes building the model. When the solver finds
    no point in time, the start is the answer, with status time_limit.
    """
    if not pi.jobs:
        return PlacementResult({}, 0.0, Status.OPTIMAL, 0.0, 0.0)
    t0 = time.perf_counter()
    milp = PlacementMilp(pi, build(pi), start)
    build_s = time.perf_counter() - t0
    outcome, solver_build_s = solver(milp, replace(settings, time_limit_s=max(settings.time_limit_s - build_s, 1e-3)))
    build_s += solver_build_s
    if outcome.status == FAILED:
        # Out of time before a first point (CP-SAT can be, even with the start as its hint): the
        # start is a valid placement, so it is the answer, flagged as unproven.
        placement = {job.id: tuple(sorted(start[job.id])) for job in pi.jobs}
        return PlacementResult(placement, placement_objective(pi, placement), TIME_LIMIT, build_s, outcome.solve_s)
    assert outcome.values is not None, "a solver that did not fail has a point"
    placement = decode(pi, model=milp.model, values=outcome.values)
    return PlacementResult(placement, placement_objective(pi, placement), outcome.status, build_s, outcome.solve_s)


def _problems(ri: RoundInput) -> list[str]:
    """Why the placement formulation cannot take this round (empty: it can)."""
    found = []
    several = len(ri.cluster.gpu_types) > 1
    kinds = {n.id: n.gpu_type for n in ri.cluster.nodes}
    for i, job in enumerate(ri.jobs):
        if several and not ri.cluster.gpu_types & job.throughput.keys():
            found.append(f"jobs[{i}].throughput_params: job {job.id!r} has parameters for none of the cluster's GPU "
                         f"types {sorted(ri.cluster.gpu_types)}; on a cluster of several types a job runs only on "
                         "types it has parameters for")
            continue
        size, lo = job.gang_gpus, max(job.min_gpus, 1)
        if not lo <= size <= job.max_gpus:
            found.append(f"jobs[{i}].requested_gpus: the placement formulation places job {job.id!r} on exactly "
                         f"{size} GPUs (requested_gpus, else min_gpus), outside its [{lo}, {job.max_gpus}]; set "
                         "requested_gpus within it")
            continue
        if job.pinned and size != len(job.current_gpus):
            found.append(f"jobs[{i}].pinned: job {job.id!r} is pinned to the {len(job.current_gpus)} GPUs it holds, "
                         f"but the placement formulation places it on {size} (requested_gpus, else min_gpus); set "
                         "requested_gpus to the GPUs it holds")
            continue
        types = _held_types(job, kinds) if job.pinned else _runs_on(ri, job)
        if job.pinned and (len(types) != 1 or not set(types) <= set(_runs_on(ri, job))):
            found.append(f"jobs[{i}].pinned: job {job.id!r} is pinned to GPUs of types {types}, but runs on GPUs of "
                         f"one type among {_runs_on(ri, job)}; unpin it or give it parameters for its GPUs' type")
            continue
        if not any(submitted_fits(job, size, t) for t in types):
            what = f"jobs[{i}].pinned" if job.pinned else f"jobs[{i}]"
            found.append(f"{what}: its batch on {size} GPUs is {_outside(job, size, types)}; change requested_gpus "
                         "or its batch")
    need, total = sum(j.gang_gpus for j in ri.jobs), ri.cluster.total_gpus
    if need > total:
        found.append(f"jobs: they need {need} GPUs, the cluster has {total}; the placement formulation places every "
                     "job it is given, so give it fewer jobs (a policy chooses which run: policies.placement)")
    return found


def _outside(job: JobSpec, num_gpus: int, types: list[str]) -> str:
    """The job's local batch on num_gpus GPUs of each type against its limits there, in words."""
    said = []
    for t in types:
        micro, _ = submitted_split(job, num_gpus, t)
        b = job.batch_on(t)
        said.append(f"{micro} per GPU, outside [{b.min_local_bsz}, {b.max_local_bsz}]"
                    + (f" on {t}" if len(types) > 1 or t in job.batch_by_type else ""))
    return "; ".join(said)


def _held_types(job: JobSpec, kinds: Mapping[str, str]) -> list[str]:
    """The GPU types of the job's current GPUs, sorted."""
    return sorted({kinds[g.node] for g in job.current_gpus})


def _runs_on(ri: RoundInput, job: JobSpec) -> list[str]:
    """The cluster's GPU types the job may run on: those it has parameters for on a cluster of
    several types, the one type otherwise."""
    types = ri.cluster.gpu_types
    return sorted(types & job.throughput.keys() if len(types) > 1 else types)


@dataclass(frozen=True)
class PlacementView:
    """A round as PAL's placement sees it, and the way back to allocations.

    `pi` holds every GPU of the cluster (id GpuRef.key) and every job on JobSpec.gang_gpus
    GPUs; `refs` maps the GPU ids back.
    """

    round_input: RoundInput
    pi: PlacementInput
    refs: Mapping[str, GpuRef]

    def allocations(self, placement: Mapping[str, tuple[str, ...]]) -> tuple[JobAllocation, ...]:
        """Every job's allocation: its placed GPUs sorted, its submitted batch within its limits
        on their type (JobSpec.batch_on), its speed, and whether its parameters there were projected."""
        out = []
        for job, pjob in zip(self.round_input.jobs, self.pi.jobs):
            gpus = tuple(sorted(self.refs[g] for g in placement[job.id]))
            gpu_type = self.pi.gpu_index[placement[job.id][0]].gpu_type
            micro, accum = submitted_split(job, len(gpus), gpu_type)
            speed = job_speed(self.pi, pjob, placement[job.id])
            out.append(JobAllocation(job.id, gpus, len(gpus) * micro * (accum + 1), micro, accum, speedup=speed,
                                     restarted=job.restarted_on(gpus), projected=job.projected_on(gpu_type)))
        return tuple(out)


def type_speeds(ri: RoundInput, job: JobSpec) -> tuple[tuple[str, float], ...]:
    """(GPU type, r) of the cluster's types the job can run on; () on a cluster of one type, or of
    several where it can run on none (placement_view refuses such a job first).

    Those are the types it has parameters for on which its submitted batch splits over
    JobSpec.gang_gpus GPUs within its limits there (JobSpec.batch_on); a pinned job's, the type
    of its GPUs. r is the job's throughput (models.throughput) on JobSpec.gang_gpus GPUs of one
    node of the type at its submitted batch split there (submitted_split), over the best of its
    types: 1 on its fastest.
    """
    if len(ri.cluster.gpu_types) < 2:
        return ()
    size = job.gang_gpus
    types = _runs_on(ri, job)
    if job.pinned:
        types = [t for t in _held_types(job, {n.id: n.gpu_type for n in ri.cluster.nodes}) if t in types]
    speed = {t: float(throughput(job.throughput[t], 1, size, *submitted_split(job, size, t)))
             for t in types if submitted_fits(job, size, t)}
    fastest = max(speed.values(), default=1.0)
    return tuple((t, v / fastest) for t, v in speed.items())


def placement_view(ri: RoundInput) -> PlacementView:
    """The round's PlacementInput (module docstring); InputError if the formulation cannot take it.

    A GPU carries its node's type; on a cluster of several types each job carries its
    `type_speeds`; a pinned job is pinned to its current GPUs.
    """
    found = _problems(ri)
    if found:
        raise InputError(found)
    classes = sorted({job.variability_class for job in ri.jobs})
    refs = {ref.key: ref for ref in (GpuRef(n.id, k) for n in ri.cluster.nodes for k in range(n.gpus))}
    nodes = {n.id: n for n in ri.cluster.nodes}
    gpus = tuple(PlacementGpu(key, ref.node, {c: nodes[ref.node].gpu_slowdown(ref.gpu, c) for c in classes},
                              nodes[ref.node].gpu_type) for key, ref in refs.items())
    jobs = tuple(PlacementJob(job.id, job.gang_gpus, job.variability_class, tuple(ref.key for ref in job.current_gpus),
                              type_speed=type_speeds(ri, job), pinned=job.pinned) for job in ri.jobs)
    topology = ri.cluster.topology
    across_node = topology.across_node_factor if topology is not None else 1.0
    return PlacementView(ri, PlacementInput(gpus, jobs, across_node, restart_penalty=0.0), refs)


@dataclass(frozen=True)
class PlacementRoundModel(OneModel):
    """The placement model of a round up to EXACT_MAX_GPUS GPUs (schedlab.milp.RoundModel).

    One MILP warm-started from PAL's greedy placement, also its fallback.
    """

    view: PlacementView
    milp: PlacementMilp

    @property
    def round_input(self) -> RoundInput:
        """The round this model was built from."""
        return self.view.round_input

    def arrays(self) -> MilpArrays:
        """The model as arrays, warm-started from PAL's greedy."""
        return self.milp.arrays()

    def pyomo(self) -> pyo.ConcreteModel:
        """The model in Pyomo."""
        return self.milp.pyomo()

    def start(self) -> np.ndarray:
        """PAL's greedy placement as a point of the model."""
        return self.milp.start()

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """Every job's allocation at the placement the point decodes to."""
        return self.view.allocations(decode(self.view.pi, self.milp.model, values))

    def objective(self, values: np.ndarray) -> float:
        """The objective of the placement the point decodes to (every job's speed)."""
        return placement_objective(self.view.pi, decode(self.view.pi, self.milp.model, values))

    def fallback(self) -> np.ndarray:
        """PAL's greedy placement (the warm start)."""
        return self.start()


@dataclass(frozen=True)
class WindowedPlacementModel:
    """The placement of a round above EXACT_MAX_GPUS GPUs (schedlab.milp.RoundModel).

    The exact model a window at a time around PAL's greedy placement (placement_windows), each
    window solved by the round's solver. A point is the holder of every GPU of `view.pi.gpus`,
    in that order (the index of its job + 1; 0 for a free GPU).
    """

    view: PlacementView
    greedy: Mapping[str, tuple[str, ...]]

    @property
    def round_input(self) -> RoundInput:
        """The round this model was built from."""
        return self.view.round_input

    def solve(self, solver: Solver, settings: Settings) -> tuple[SolveOutcome, float]:
        """Windows of the exact model solved by `solver` within settings.time_limit_s.

        The outcome's point is the placement found (a holder per GPU), its bound
        placement_windows.upper_bound, its message the windows' count. No build time is
        reported apart (0.0): the windows build their models within the time limit.
        """
        t0 = time.perf_counter()
        found = search_windows(self.view.pi, self.greedy, settings.time_limit_s, lambda sub, left_s, sub_start:
                               solve_exact(sub, solver, replace(settings, time_limit_s=left_s), sub_start).placement)
        objective, bound = placement_objective(self.view.pi, found.placement), upper_bound(self.view.pi)
        outcome = SolveOutcome(status(bound, objective, settings.mip_gap), self._point(found.placement), objective,
                               bound, time.perf_counter() - t0,
                               f"{found.windows} windows solved, {found.improved} improved")
        return outcome, 0.0

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """Every job's allocation at the placement of a point (a holder per GPU)."""
        return self.view.allocations(self._placement(values))

    def objective(self, values: np.ndarray) -> float:
        """The objective of the placement of a point (every job's speed)."""
        return placement_objective(self.view.pi, self._placement(values))

    def fallback(self) -> np.ndarray:
        """PAL's greedy placement as a point."""
        return self._point(self.greedy)

    def _point(self, placement: Mapping[str, tuple[str, ...]]) -> np.ndarray:
        index = {g.id: i for i, g in enumerate(self.view.pi.gpus)}
        holder = np.zeros(len(index))
        for j, job in enumerate(self.view.pi.jobs):
            holder[[index[g] for g in placement[job.id]]] = j + 1
        return holder

    def _placement(self, values: np.ndarray) -> dict[str, tuple[str, ...]]:
        holder = np.rint(values).astype(int)
        gpus = np.array([g.id for g in self.view.pi.gpus], dtype=object)
        order = np.argsort(holder, kind="stable")
        cuts = np.searchsorted(holder[order], np.arange(1, len(self.view.pi.jobs) + 2))
        return {job.id: tuple(sorted(gpus[order[cuts[j]:cuts[j + 1]]])) for j, job in enumerate(self.view.pi.jobs)}


def placement_model(round_input: RoundInput) -> PlacementRoundModel | WindowedPlacementModel:
    """PAL's exact placement of every job of the round on its JobSpec.gang_gpus GPUs (FORMULATIONS["placement"]).

    The model of formulations.placement's module docstring: one MILP up to EXACT_MAX_GPUS GPUs,
    windows of it above, both warm-started from PAL's greedy placement. InputError
    (placement_view) when the formulation cannot take the round: a job with parameters for
    none of several GPU types, a job that cannot run on its gang size (its batch within its
    limits on no type it may run on), a pinned job whose gang size is not the GPUs it holds, or
    jobs needing more GPUs than the cluster has (or, from PAL's greedy, than their types have).
    """
    view = placement_view(round_input)
    greedy = pal_greedy(view.pi, np.random.default_rng(round_input.settings.seed))
    if len(view.pi.gpus) > EXACT_MAX_GPUS:
        return WindowedPlacementModel(view, greedy)
    return PlacementRoundModel(view, PlacementMilp(view.pi, build(view.pi), greedy))
