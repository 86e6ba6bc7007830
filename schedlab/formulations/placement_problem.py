"""The placement problem (PAL, Jain et al. SC'24): jobs of fixed GPU counts onto concrete GPUs.

A `PlacementInput` holds the GPUs the chosen jobs may use (each on a node, of a GPU type, with a
slowdown per application class) and the jobs, every one to be placed on exactly `num_gpus` of
them, all of one GPU type it can run on. A placement (`Placement`) maps each job id to its GPU
ids. Its worth (`placement_objective`) is the weighted sum of the jobs' speeds (`job_speed`:
1 / (worst effective slowdown x locality factor)), less the restart penalty of each running job
it moves. A GPU's effective slowdown for a job is its slowdown within its type divided by the
job's relative speed on that type (`PlacementJob.speed_on`; 1 on a cluster of one type), so
PAL's slowdowns compare GPUs of one type and the type's speed compares types. The exact model (formulations.placement),
PAL's greedy (formulations.placement_greedy), the windows (formulations.placement_windows) and
the placement policies (policies.placement) all solve this one problem.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from schedlab.errors import InputError

__all__ = ["Placement", "PlacementGpu", "PlacementInput", "PlacementJob", "effective_slowdown", "job_speed",
           "pinned_placement", "placement_objective", "type_plan"]

Placement = dict[str, tuple[str, ...]]  # job id -> GPU ids


@dataclass(frozen=True)
class PlacementGpu:
    """One GPU: its id, its node's id, its slowdown per application class and its GPU type."""

    id: str
    node: str
    slowdown: Mapping[str, float]  # application class -> factor within its type (1 = typical, higher = slower)
    gpu_type: str = "default"


@dataclass(frozen=True)
class PlacementJob:
    """One job to place on exactly `num_gpus` GPUs.

    Its application class says whose slowdowns apply; `current_gpus` are the GPU ids it runs
    on now (empty: waiting); `weight` is w_j, its weight in the objective. `type_speed` lists
    (GPU type, r) for the types it can run on, r its speed there relative to its fastest type
    (in (0, 1]); empty, it runs on every type at r = 1 (a cluster of one type). A `pinned` job
    keeps exactly its current GPUs (a checkpoint or restore in progress): every placement puts it there.
    """

    id: str
    num_gpus: int
    app_class: str
    current_gpus: tuple[str, ...] = ()
    weight: float = 1.0
    type_speed: tuple[tuple[str, float], ...] = ()
    pinned: bool = False

    def speed_on(self, gpu_type: str) -> float:
        """r, the job's relative speed on GPUs of `gpu_type`: 0 where it cannot run (type_speed)."""
        if not self.type_speed:
            return 1.0
        return next((r for t, r in self.type_speed if t == gpu_type), 0.0)

    def moved_to(self, gpu_ids: tuple[str, ...]) -> bool:
        """Whether placing the job on `gpu_ids` moves it: it runs now, on other GPUs.

        The rule of JobSpec.restarted_on, on the placement's GPU ids.
        """
        return bool(self.current_gpus) and set(gpu_ids) != set(self.current_gpus)


@dataclass(frozen=True)
class PlacementInput:
    """The GPUs offered and the jobs to place on them (module docstring).

    Attributes
    ----------
    gpus
        The GPUs the chosen jobs may use.
    jobs
        The jobs chosen to run, every one to be placed.
    across_node
        The locality factor L: a job spread over nodes runs L times slower (PAL's simulator: 1.7).
    restart_penalty
        rho, the fraction of a round's speed a move costs.
    gpu_index
        GPU id -> GPU, derived from `gpus`.

    Raises
    ------
    InputError
        When the jobs need more GPUs than offered, a GPU is current for two jobs, a GPU has no
        slowdown for a class in play, no GPU type a job can run on has its GPUs, or a pinned
        job's current GPUs are not `num_gpus` GPUs offered.
    """

    gpus: tuple[PlacementGpu, ...]  # the GPUs the chosen jobs may use
    jobs: tuple[PlacementJob, ...]  # the jobs chosen to run, all to be placed
    across_node: float = 1.7
    restart_penalty: float = 0.0  # rho: fraction of a round's speed a move costs
    gpu_index: dict[str, PlacementGpu] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Index the GPUs by id and check the problem (the class docstring's InputError)."""
        object.__setattr__(self, "gpu_index", {g.id: g for g in self.gpus})
        need = sum(j.num_gpus for j in self.jobs)
        if need > len(self.gpus):
            raise InputError([f"placement: jobs need {need} GPUs, {len(self.gpus)} offered; choose fewer jobs"])
        holder: dict[str, str] = {}
        for j in self.jobs:
            for g in j.current_gpus:
                if g in holder:
                    raise InputError([f"placement: GPU {g} is current for both {holder[g]} and {j.id}; "
                                      "a GPU runs one job"])
                holder[g] = j.id
        stuck = [f"placement: job {j.id} is pinned to its {len(j.current_gpus)} current GPUs, but needs {j.num_gpus} "
                 "and all of its current GPUs offered" for j in self.jobs if j.pinned and (
                     len(j.current_gpus) != j.num_gpus or any(g not in self.gpu_index for g in j.current_gpus))]
        if stuck:
            raise InputError(stuck)
        first_of_class = {j.app_class: j for j in reversed(self.jobs)}
        for c, j in first_of_class.items():
            missing = next((g for g in self.gpus if c not in g.slowdown), None)
            if missing is not None:
                raise InputError([f"placement: GPU {missing.id} has no slowdown for class {c!r} (job {j.id})"])
        per_type = Counter(g.gpu_type for g in self.gpus)
        short = [f"placement: job {j.id} needs {j.num_gpus} GPUs of one type it can run on; its types offer at most "
                 f"{max((n for t, n in per_type.items() if j.speed_on(t) > 0), default=0)}"
                 for j in self.jobs if not any(n >= j.num_gpus and j.speed_on(t) > 0 for t, n in per_type.items())]
        if short:
            raise InputError(short)

    def node_of(self, gpu: str) -> str:
        """The node of GPU id `gpu`."""
        return self.gpu_index[gpu].node

    def by_node(self, gpu_ids: Iterable[str]) -> dict[str, list[str]]:
        """The GPUs grouped by node, in the order given."""
        out: dict[str, list[str]] = {}
        for g in gpu_ids:
            out.setdefault(self.node_of(g), []).append(g)
        return out


def effective_slowdown(job: PlacementJob, gpu: PlacementGpu) -> float:
    """The GPU's slowdown for the job over the job's relative speed on its type (inf where it cannot run)."""
    r = job.speed_on(gpu.gpu_type)
    return gpu.slowdown[job.app_class] / r if r > 0 else float("inf")


def job_speed(pi: PlacementInput, job: PlacementJob, gpu_ids: tuple[str, ...]) -> float:
    """A job's speed on `gpu_ids`: 1 / (worst effective slowdown of its GPUs x locality factor).

    The data-parallel job runs at the speed of its slowest GPU (PAL); the locality factor is
    `across_node` when its GPUs span nodes, else 1. A job on typical GPUs of one node of its
    fastest type runs at 1; on a type it cannot run on, at 0.
    """
    chosen = [pi.gpu_index[g] for g in gpu_ids]
    worst = max(effective_slowdown(job, g) for g in chosen)
    spread = pi.across_node if len({g.node for g in chosen}) > 1 else 1.0
    return 1.0 / (worst * spread)


def placement_objective(pi: PlacementInput, placement: Mapping[str, tuple[str, ...]]) -> float:
    """The round objective of a placement (job id -> GPU ids), as the MILP counts it.

    sum_j w_j (speed_j - rho [j moved]): every job's weighted speed (`job_speed`), less the
    restart penalty of each running job the placement moves.
    """
    total = 0.0
    for job in pi.jobs:
        gpu_ids = placement[job.id]
        total += job.weight * (job_speed(pi, job, gpu_ids) - pi.restart_penalty * job.moved_to(gpu_ids))
    return total


def pinned_placement(pi: PlacementInput) -> Placement:
    """The pinned jobs on their current GPUs, sorted: where every placement puts them first."""
    return {job.id: tuple(sorted(job.current_gpus)) for job in pi.jobs if job.pinned}


def type_plan(pi: PlacementInput) -> dict[str, str]:
    """A GPU type for every job such that the jobs fit on their types together (by GPU count).

    Pinned jobs first, on the type of their GPUs; then the largest job first (ties: the job of
    fewer types, then input order), each on the type of its current GPUs where it runs on one it
    can run on, else the fastest type for it, with its GPUs left (ties: the most left, then the
    name). Where that leaves a job without room, the assignment is solved exactly
    (`_assign_types`, pinned jobs on their GPUs' type). Within one type any jobs whose GPUs add up
    to no more than the type's fit, so a greedy placement that keeps each job on its planned
    type never runs out.

    Raises
    ------
    InputError
        When no assignment fits: the jobs do not fit on their types together (choose fewer jobs).
    """
    left = Counter(g.gpu_type for g in pi.gpus)
    kinds = {j.id: sum(j.speed_on(t) > 0 for t in left) for j in pi.jobs}
    out = {}
    for job in sorted(pi.jobs, key=lambda j: (not j.pinned, -j.num_gpus, kinds[j.id])):  # stable: input order on ties
        fits = [t for t in sorted(left) if left[t] >= job.num_gpus and job.speed_on(t) > 0]
        if not fits:
            return _assign_types(pi)
        held = {pi.gpu_index[g].gpu_type for g in job.current_gpus if g in pi.gpu_index}
        out[job.id] = min(fits, key=lambda t: (held != {t}, -job.speed_on(t), -left[t]))
        left[out[job.id]] -= job.num_gpus
    return out


def _assign_types(pi: PlacementInput) -> dict[str, str]:
    """A type per job that fits by count, found exactly, the jobs' speeds on them as large as can be.

    max sum_j sum_theta r_j theta a_j theta s.t. sum_theta a_j theta = 1 (j), sum_j G_j a_j theta
    <= GPUs of theta (theta), a binary and 0 off the job's types (a pinned job's: its GPUs'): a
    small assignment MILP (scipy.optimize.milp; the placement model needs no solver for it).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp  # here: only where the greedy plan fails

    types = sorted({g.gpu_type for g in pi.gpus})
    cap = Counter(g.gpu_type for g in pi.gpus)
    r = np.array([[job.speed_on(t) * (not job.pinned or t == _held_type(pi, job)) for t in types]
                  for job in pi.jobs]).ravel()  # a pinned job only on its GPUs' type
    one = np.kron(np.eye(len(pi.jobs)), np.ones(len(types)))
    use = np.kron(np.array([[job.num_gpus for job in pi.jobs]], dtype=float), np.eye(len(types)))
    found = milp(-r, integrality=np.ones(len(r)), bounds=Bounds(0, (r > 0).astype(float)),
                 constraints=[LinearConstraint(one, 1, 1), LinearConstraint(use, 0, [cap[t] for t in types])])
    if found.x is None:
        raise InputError([f"placement: the jobs ({', '.join(j.id for j in pi.jobs)}) do not fit on the GPU types "
                          "they can run on together; choose fewer jobs"])
    chosen = np.rint(found.x).reshape(len(pi.jobs), len(types)).argmax(axis=1)
    return {job.id: types[t] for job, t in zip(pi.jobs, chosen)}


def _held_type(pi: PlacementInput, job: PlacementJob) -> str:
    """The GPU type of the job's current GPUs (of a pinned job: PlacementInput checked they are offered)."""
    return pi.gpu_index[job.current_gpus[0]].gpu_type
