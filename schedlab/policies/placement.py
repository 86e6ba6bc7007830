"""Placement policies: which concrete GPUs each chosen job gets (PAL's comparison set).

Each placement function maps a PlacementInput (the jobs chosen this round, the GPUs they may use)
and a seeded Generator to job id -> GPU ids, every job getting exactly its GPU count; each places
the pinned jobs first, on their current GPUs (placement_problem.pinned_placement).
  pal               PAL's greedy as published (Jain et al. SC'24, Alg. 1;
                    formulations.placement_greedy.pal_greedy, also the exact model's warm start).
  pm_first          GPUs sorted by the job's class slowdown; ties prefer the node holding the
                    most such GPUs (so a job stays on one node when it can).
  packed_sticky     running jobs keep their GPUs; new jobs on the fewest nodes, ignoring slowdown.
  packed_nonsticky  every job re-packed each round on the fewest nodes.
  random            uniformly random GPUs.
  milp, milp_cpsat  the exact model (formulations.placement), HiGHS or CP-SAT.

The same names are policies of the one registry (schedlab.policies.POLICIES), each running a
round of a RoundInput as PAL's simulator does: `pal_queue` chooses the jobs that run (in `order`
while their requested GPUs fit, stopping at the first that does not unless `backfill`), and the
placement places them on the cluster's GPUs as formulations.placement_round sees them (slowdowns from
Node.slowdown, the topology's across_node_factor). Jobs train at the batch they submitted
(batch_mode "fixed"). Greedy placements report status heuristic; milp and milp_cpsat solve the
"placement" round formulation through solve_round (warm-started from pal, `time_limit_s` per
round) and report the solver's status. The objective is the placement's (every running job's
speed). policies.compose places the jobs an allocation policy chose instead.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from schedlab.api import solve_round
from schedlab.errors import ConfigError
from schedlab.formulations.placement_greedy import pal_greedy
from schedlab.formulations.placement_problem import (
    Placement,
    PlacementInput,
    PlacementJob,
    pinned_placement,
    placement_objective,
    type_plan,
)
from schedlab.formulations.placement_round import placement_view, type_speeds
from schedlab.policies.base import HEURISTIC
from schedlab.state import JobAllocation, JobSpec, RoundInput, RoundResult, Settings
from schedlab.verify import verify

__all__ = ["QUEUE_ORDERS", "ExactPlacementPolicy", "GreedyPlacementPolicy", "MilpCpsatPolicy", "MilpPolicy",
           "PackedNonstickyPolicy", "PackedStickyPolicy", "PalPolicy", "PlacementPolicy", "PmFirstPolicy",
           "RandomPlacementPolicy", "gang_round", "packed_nonsticky", "packed_sticky", "pal_queue", "pm_first",
           "pm_take", "random_placement"]


def _free(pi: PlacementInput) -> list[str]:
    return [g.id for g in pi.gpus]


def _left(pi: PlacementInput, placed: Placement) -> list[str]:
    """The offered GPUs that `placed` leaves free, in order."""
    held = {g for gpus in placed.values() for g in gpus}
    return [g for g in _free(pi) if g not in held]


def _sf(pi: PlacementInput, job: PlacementJob, gpu: str) -> float:
    return pi.gpu_index[gpu].slowdown[job.app_class]


def _planned(pi: PlacementInput) -> dict[str, str] | None:
    """Each job's GPU type on a cluster of several (placement_problem.type_plan); None on one type."""
    return type_plan(pi) if len({g.gpu_type for g in pi.gpus}) > 1 else None


def _of_type(pi: PlacementInput, free: list[str], gpu_type: str | None) -> list[str]:
    """The GPUs of `free` of `gpu_type`, in order (all of them for None)."""
    return free if gpu_type is None else [g for g in free if pi.gpu_index[g].gpu_type == gpu_type]


def pm_take(pi: PlacementInput, job: PlacementJob, free: list[str], gpu_type: str | None = None) -> list[str]:
    """PM-First's GPUs for one job: lowest slowdown first, packed on a node where ties allow.

    The free GPUs (of `gpu_type` where given) ranked by (the job class's slowdown, minus the
    GPUs of the same node at that slowdown, node id, GPU id); the job takes the first
    `num_gpus`. Preferring the node with the most equally fast GPUs keeps a job on one node
    when one holds enough of them.
    """
    free = _of_type(pi, free, gpu_type)
    per_node = pi.by_node(free)
    same = {g: sum(1 for h in per_node[pi.node_of(g)] if _sf(pi, job, h) == _sf(pi, job, g)) for g in free}
    ranked = sorted(free, key=lambda g: (_sf(pi, job, g), -same[g], pi.node_of(g), g))
    return ranked[: job.num_gpus]


def pm_first(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    """PM-First (PAL's baseline): the jobs in input order, each on its `pm_take` GPUs of those still free.

    On a cluster of several GPU types each job takes GPUs of its type_plan type. `rng` is
    unused: every placement function takes one (the random placement draws from it).
    """
    out, plan = pinned_placement(pi), _planned(pi)
    free = _left(pi, out)
    for job in (job for job in pi.jobs if job.id not in out):
        out[job.id] = tuple(pm_take(pi, job, free, None if plan is None else plan[job.id]))
        free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


def _pack(pi: PlacementInput, job: PlacementJob, free: list[str], gpu_type: str | None) -> list[str]:
    """Fewest nodes (of `gpu_type` where given): the tightest node that fits, else the nodes with the most free GPUs."""
    per_node = pi.by_node(_of_type(pi, free, gpu_type))
    fits = [gs for gs in per_node.values() if len(gs) >= job.num_gpus]
    if fits:
        tightest = min(fits, key=lambda gs: (len(gs), pi.node_of(gs[0])))
        return sorted(tightest)[: job.num_gpus]
    taken: list[str] = []
    for gs in sorted(per_node.values(), key=lambda gs: (-len(gs), pi.node_of(gs[0]))):
        taken += sorted(gs)[: job.num_gpus - len(taken)]
        if len(taken) == job.num_gpus:
            break
    return taken


def packed_sticky(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    """Packed, sticky: running jobs keep their GPUs, new ones go on the fewest nodes, slowdowns ignored.

    A running job keeps its current GPUs when they are all offered, as many as it needs and (on
    a cluster of several types) of its type_plan type, which is theirs where it fits;
    every other job, in input order, takes the tightest node that fits it, else the nodes with
    the most free GPUs (`_pack`), of its type_plan type on a cluster of several types. `rng` is
    unused.
    """
    plan = _planned(pi)
    out = {j.id: tuple(sorted(j.current_gpus)) for j in pi.jobs
           if j.current_gpus and len(j.current_gpus) == j.num_gpus and all(g in pi.gpu_index for g in j.current_gpus)
           and (plan is None or {pi.gpu_index[g].gpu_type for g in j.current_gpus} == {plan[j.id]})}
    free = _left(pi, out)
    for job in pi.jobs:
        if job.id not in out:
            out[job.id] = tuple(_pack(pi, job, free, None if plan is None else plan[job.id]))
            free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


def packed_nonsticky(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    """Packed, not sticky: every job re-packed each round on the fewest nodes, slowdowns ignored.

    Jobs are packed largest first (ties in input order) as `packed_sticky` packs new ones, so a
    running job may move; each on its type_plan type on a cluster of several types. `rng` is
    unused.
    """
    out, plan = pinned_placement(pi), _planned(pi)
    free = _left(pi, out)
    for job in sorted((job for job in pi.jobs if job.id not in out), key=lambda j: -j.num_gpus):
        out[job.id] = tuple(_pack(pi, job, free, None if plan is None else plan[job.id]))
        free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


def random_placement(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    """Uniformly random GPUs: one permutation of the offered GPUs, drawn from `rng`, dealt to the jobs in input order.

    On a cluster of several GPU types each job takes the first GPUs of the permutation of its
    type_plan type.
    """
    out, plan = pinned_placement(pi), _planned(pi)
    held = {g for gpus in out.values() for g in gpus}
    free = [str(g) for g in rng.permutation(_free(pi)) if g not in held]
    for job in (job for job in pi.jobs if job.id not in out):
        out[job.id] = tuple(sorted(_of_type(pi, free, None if plan is None else plan[job.id])[: job.num_gpus]))
        taken = set(out[job.id])
        free = [g for g in free if g not in taken]
    return {job.id: out[job.id] for job in pi.jobs}


# PAL's queue orders: the sort key of a job (smallest first).
QUEUE_ORDERS: dict[str, Callable[[JobSpec], float]] = {
    "fifo": lambda job: -job.age_s,  # oldest first
    "las": lambda job: job.attained_service_gpu_s,  # least attained service first
    "srtf": lambda job: math.inf if job.remaining_steps is None else job.remaining_steps,  # unknown: last
}


def pal_queue(round_input: RoundInput, order: str, backfill: bool = False) -> dict[str, int]:
    """PAL's cut of the queue: which jobs run this round, on how many GPUs.

    Pinned jobs run, first; the others are taken in `order` (ties: oldest first, then input
    order) while their GPUs (JobSpec.gang_gpus) fit in the cluster's GPUs left; the first that
    does not fit stops the queue, unless `backfill`, which goes on with the jobs behind it. On a cluster of several GPU
    types a job fits when a type it can run on has its GPUs left, and counts against the fastest
    such type for it (placement_round.type_speeds, a pinned job's: its GPUs'; ties: the most
    left, then the name), so the jobs chosen fit on their types together.

    Parameters
    ----------
    round_input
        The round: its cluster's total GPUs are the capacity.
    order
        A key of QUEUE_ORDERS: "fifo", "las" or "srtf".
    backfill
        Whether jobs behind one that does not fit may still run.

    Returns
    -------
    dict[str, int]
        Job id -> GPUs, for the jobs that run, in queue order.
    """
    key, left, counts = QUEUE_ORDERS[order], Counter[str](), {}
    for node in round_input.cluster.nodes:
        left[node.gpu_type] += node.gpus
    for job in sorted(round_input.jobs, key=lambda j: (not j.pinned, key(j), -j.age_s)):
        size = job.gang_gpus
        speeds = dict(type_speeds(round_input, job)) if len(left) > 1 else dict.fromkeys(left, 1.0)
        fits = [t for t, r in speeds.items() if left[t] >= size]
        if fits:
            counts[job.id] = size
            left[min(fits, key=lambda t: (-speeds[t], -left[t], t))] -= size
        elif not backfill:
            break
    return counts


def gang_round(round_input: RoundInput, counts: Mapping[str, int],
               batches: Mapping[str, int] | None = None) -> RoundInput:
    """The round a placement places: only the jobs of `counts`, each on exactly that many GPUs.

    Each job of `counts` asks for exactly its count (requested_gpus) and, where `batches` names
    it, that total batch (fixed_bsz); the other jobs are left out. Opt-ins to freezing are
    dropped: a placement freezes nothing.
    """
    batches = batches or {}
    return replace(round_input, jobs=tuple(
        replace(job, requested_gpus=counts[job.id], fixed_bsz=batches.get(job.id, job.fixed_bsz), freezing=None)
        for job in round_input.jobs if job.id in counts))


@dataclass
class PlacementPolicy(ABC):
    """PAL's simulator as a policy: `pal_queue` chooses the jobs that run, `place` their GPUs.

    Jobs train at the batch they submitted (batch_mode "fixed") and are valued with the full
    measured tables (throughput_model "oracle").

    Attributes
    ----------
    order
        The queue's order, a key of QUEUE_ORDERS.
    backfill
        Whether the queue goes on past a job that does not fit.
    seed
        The random placement's draws and the exact solvers' seed.

    Raises
    ------
    ConfigError
        When `order` is not a key of QUEUE_ORDERS.
    """

    order: str = "fifo"
    backfill: bool = False
    seed: int = 0
    name: ClassVar[str]
    batch_mode: ClassVar[str] = "fixed"
    throughput_model: ClassVar[str] = "oracle"
    _rng: np.random.Generator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check the queue order and seed the policy's generator."""
        if self.order not in QUEUE_ORDERS:
            raise ConfigError(f"order {self.order!r}: use one of {', '.join(QUEUE_ORDERS)}")
        self._rng = np.random.default_rng(self.seed)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """One round: the jobs `pal_queue` chooses, placed by `place`; every other job waits.

        Returns the verified RoundResult of `place`, with an allocation for every job of
        `round_input` in its order (an empty one for a job that waits).
        """
        placed = self.place(gang_round(round_input, pal_queue(round_input, self.order, self.backfill)))
        by_job = {a.job_id: a for a in placed.allocations}
        allocations = tuple(by_job.get(job.id) or JobAllocation.unallocated(job.id) for job in round_input.jobs)
        verify(round_input, allocations)
        return replace(placed, allocations=allocations)

    @abstractmethod
    def place(self, round_input: RoundInput) -> RoundResult:
        """Every job of `round_input` on exactly its requested_gpus GPUs: that round's verified RoundResult.

        `round_input` is a round `gang_round` built: the jobs that run, each asking for its GPUs.
        """


@dataclass
class GreedyPlacementPolicy(PlacementPolicy):
    """A policy that places with a placement function, `greedy`; status heuristic."""

    @staticmethod
    def greedy(pi: PlacementInput, rng: np.random.Generator) -> Placement:
        """The placement function (a subclass's): every job of `pi` on its GPUs."""
        raise NotImplementedError

    def place(self, round_input: RoundInput) -> RoundResult:
        """Every job on the GPUs `greedy` gives it in the round's placement view.

        The objective is the placement's (placement_objective: every job's speed); there is no
        bound or gap (NaN), and solve_s is the seconds the whole placement took.
        """
        t0 = time.perf_counter()
        view = placement_view(round_input)
        placement = self.greedy(view.pi, self._rng)
        allocations = view.allocations(placement)
        verify(round_input, allocations)
        return RoundResult(allocations, HEURISTIC, self.name, placement_objective(view.pi, placement), math.nan,
                           math.nan, 0.0, time.perf_counter() - t0, True)


@dataclass
class ExactPlacementPolicy(PlacementPolicy):
    """A policy that places with the "placement" round formulation, solved by `solver` in `time_limit_s`.

    The MILP of formulations.placement, warm-started from PAL's greedy (its fallback too), so
    its placement is never worse than the `pal` policy's; the status is the solver's.
    """

    time_limit_s: float = 1.0
    solver: ClassVar[str]

    def place(self, round_input: RoundInput) -> RoundResult:
        """The round solved by solve_round with the "placement" formulation, this policy's solver, time limit and seed."""
        settings = Settings(formulation="placement", solver=self.solver, time_limit_s=self.time_limit_s, seed=self.seed)
        return solve_round(replace(round_input, settings=settings))


@dataclass
class PalPolicy(GreedyPlacementPolicy):
    """`pal`: PAL's greedy as published (Jain et al. SC'24, Alg. 1; placement_greedy.pal_greedy)."""

    name: ClassVar[str] = "pal"
    greedy = staticmethod(pal_greedy)


@dataclass
class PmFirstPolicy(GreedyPlacementPolicy):
    """`pm_first`: each job on its least-slowdown GPUs, one node where ties allow (`pm_first`)."""

    name: ClassVar[str] = "pm_first"
    greedy = staticmethod(pm_first)


@dataclass
class PackedStickyPolicy(GreedyPlacementPolicy):
    """`packed_sticky`: running jobs stay, new ones on the fewest nodes (`packed_sticky`)."""

    name: ClassVar[str] = "packed_sticky"
    greedy = staticmethod(packed_sticky)


@dataclass
class PackedNonstickyPolicy(GreedyPlacementPolicy):
    """`packed_nonsticky`: every job re-packed on the fewest nodes each round (`packed_nonsticky`)."""

    name: ClassVar[str] = "packed_nonsticky"
    greedy = staticmethod(packed_nonsticky)


@dataclass
class RandomPlacementPolicy(GreedyPlacementPolicy):
    """`random`: uniformly random GPUs, drawn from the policy's seeded generator (`random_placement`)."""

    name: ClassVar[str] = "random"
    greedy = staticmethod(random_placement)


@dataclass
class MilpPolicy(ExactPlacementPolicy):
    """`milp`: the exact placement model solved by HiGHS."""

    name: ClassVar[str] = "milp"
    solver: ClassVar[str] = "highs"


@dataclass
class MilpCpsatPolicy(ExactPlacementPolicy):
    """`milp_cpsat`: the exact placement model solved by CP-SAT, from the same arrays."""

    name: ClassVar[str] = "milp_cpsat"
    solver: ClassVar[str] = "cpsat"
