"""A replayed job: its trace record, its state, its own online model, and how it advances.

A job advances through a round as in the Pollux artifact's simulator (Job.step): after every
(re)allocation it makes no progress for the restart delay; then it progresses at
gain / step_time per second (true values from sim.truth) and crosses epoch boundaries
exactly: the JCT of a job finishing mid-round is the exact crossing time, not the round end.
Adaptive jobs (Pollux's agent) re-pick their batch after every segment from their own model,
fitted online to the (placement, local batch) -> step/sync times they have actually measured.

A job that opts in to freezing (`Freezing`) runs with the layer groups its last allocation
froze: its measured step shrinks as models.freezing.frozen_step_sync_s says, each step is worth
1 - pi(phi, q) of a full one (q at the start of each segment, segments end at epochs), and it
spends pi x (progress made) / (progress to completion) of its budget. Its agent records the
unfrozen times (its model describes the full step; freezing scales it analytically).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from schedlab.models.efficiency import BatchGrid, batch_grid, best_on_grid, gain
from schedlab.models.freezing import frozen_fraction, frozen_step_sync_s, penalty
from schedlab.models.throughput import fit_throughput_params, throughput
from schedlab.sim.truth import ApplicationTruth, BatchSplit
from schedlab.state import BatchLimits, FreezePenalty, GpuRef, GradStats, LayerGroup, ThroughputParams

__all__ = ["Freezing", "JobAgent", "JobState", "StepScale", "TraceJob", "advance", "advance_to", "advance_work",
           "isolated_time_s", "reallocate", "remaining_steps"]


@dataclass(frozen=True)
class TraceJob:
    """One job of a workload: what the user submitted.

    `work_s` set: a job of fixed work (PAL's simulator: seconds at full speed on its requested
    GPUs, advance_work); `steps` set: a rigid job of Gavel's, that many steps of its job type
    (`application`) on exactly `num_replicas` GPUs at `batch_size` (sim.gavel); neither: it
    trains until its completion epoch (Pollux's, advance). `app_class`: its GPUs' variability
    class (default: from the application)."""

    name: str
    application: str
    submit_s: float
    num_replicas: int
    batch_size: int
    work_s: float | None = None
    app_class: str | None = None
    steps: float | None = None


@dataclass(frozen=True)
class Freezing:
    """A job's opt-in to layer freezing: its layer groups, penalty model and budget."""

    groups: tuple[LayerGroup, ...]
    penalty: FreezePenalty
    budget: float


@dataclass(frozen=True)
class JobState:
    """A job as the replay holds it between rounds; advance and reallocate give the next one.

    Attributes
    ----------
    job
        What the user submitted.
    gpus
        The GPUs it holds (empty: waiting or preempted).
    split
        Its batch on them (None while it holds none).
    progress
        Training done: in the application's progress unit (sim.truth: M0-equivalent steps), for
        a job of fixed work seconds of work at full speed, for a job of Gavel's its steps.
    epoch
        Epochs finished.
    rescale_left_s
        Restart delay still to sit out on its current GPUs before it progresses.
    attained_gpu_s
        GPU-seconds it has held, restart delays included.
    num_allocations
        Starts and moves so far.
    completion_s
        When it finished (None: not yet).
    grad
        The gradient statistics it measured last (None before it ran).
    frozen_groups
        Layer freezing: how many layer groups its last allocation froze.
    penalty_spent
        Layer freezing: the accuracy penalty spent of its budget.
    """

    job: TraceJob
    gpus: tuple[GpuRef, ...] = ()
    split: BatchSplit | None = None
    progress: float = 0.0
    epoch: int = 0
    rescale_left_s: float = 0.0
    attained_gpu_s: float = 0.0
    num_allocations: int = 0
    completion_s: float | None = None
    grad: GradStats | None = None
    frozen_groups: int = 0
    penalty_spent: float = 0.0

    @property
    def done(self) -> bool:
        """Whether the job has finished (its completion time is set)."""
        return self.completion_s is not None

    @property
    def num_restarts(self) -> int:
        """Reallocations after the first start (the artifact's num_restarts)."""
        return max(self.num_allocations - 1, 0)

    @property
    def placement(self) -> tuple[int, ...]:
        """GPUs per node, nodes in the order the job holds them."""
        return _placement(self.gpus)

    @property
    def total_bsz(self) -> int:
        """The total batch it trains at on its GPUs (0 while it holds none)."""
        return self.split.total_bsz(len(self.gpus)) if self.split and self.gpus else 0


def _placement(gpus: tuple[GpuRef, ...]) -> tuple[int, ...]:
    """JobState.placement of a tuple of GPUs, remembered by the tuple's identity: a job holds the
    same tuple round after round, and every round's advance read its placement (counted anew, GPU
    by GPU: 1.7 % of a Philly replay). The tuple is held with the answer, so its id is not reused."""
    hit = _PLACEMENTS.get(id(gpus))
    if hit is not None and hit[0] is gpus:
        return hit[1]
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g.node] = counts.get(g.node, 0) + 1
    placement = tuple(counts.values())
    if len(_PLACEMENTS) >= PLACEMENT_MEMO_SIZE:
        _PLACEMENTS.clear()
    _PLACEMENTS[id(gpus)] = (gpus, placement)
    return placement


PLACEMENT_MEMO_SIZE = 1 << 16  # starts over when full
_PLACEMENTS: dict[int, tuple[tuple[GpuRef, ...], tuple[int, ...]]] = {}


class JobAgent:
    """What the job itself knows: its measured step times and a model fitted to them.

    Pollux's agent: step and sync seconds per configuration (nodes, replicas, local batch) as
    it has run them, and the throughput model fitted to those (models.throughput), lazily and
    warm-started from the previous fit. `adaptive` jobs re-pick their batch from it.
    """

    def __init__(self, truth: ApplicationTruth, adaptive: bool):
        self.truth = truth
        self.adaptive = adaptive
        self._profile: dict[tuple[int, int, int], tuple[float, float]] = {}
        self._params: ThroughputParams | None = None
        self._stale = False
        self._max_replicas = 0

    def observe(self, num_nodes: int, num_replicas: int, local_bsz: int, step_s: float, sync_s: float) -> None:
        """Record the step and sync seconds measured on one configuration.

        A configuration is measured once: later measurements of it change nothing. A new one
        makes the model stale, refitted when `params` is next read.
        """
        key = (num_nodes, num_replicas, local_bsz)
        if key not in self._profile:
            self._profile[key] = (step_s, sync_s)
            self._stale = True
            self._max_replicas = max(self._max_replicas, num_replicas)

    @property
    def max_profiled_replicas(self) -> int:
        """The most GPUs the job has measured itself on (0 before any measurement).

        As Pollux's agent, the online view lets a policy explore at most twice as many
        (sim.view.online_view).
        """
        return self._max_replicas

    @property
    def params(self) -> ThroughputParams | None:
        """The fitted model, or None before the first measurement."""
        if self._stale:
            self._params = _fit(tuple((*k, *v) for k, v in self._profile.items()), self._params)
            self._stale = False
        return self._params

    def choose_split(self, num_nodes: int, num_replicas: int, grad: GradStats | None,
                     fixed_bsz: int | None) -> BatchSplit:
        """The batch the job runs on its GPUs (`num_replicas` over `num_nodes`): fixed by the
        user, or the best goodput under its own model and the gradient statistics it measured
        (before any measurement: the smallest batch that fits, as Pollux's agent)."""
        r = num_replicas
        if fixed_bsz is not None:
            return self.truth.split_fixed_batch(fixed_bsz, r)
        params = self.params
        if params is None or grad is None:
            return self.truth.split_fixed_batch(max(self.truth.init_bsz, self.truth.min_local_bsz * r), r)
        return _best_split(params, grad, self.truth.limits, num_nodes, r)


# A fit and a best batch are pure functions of their inputs, and jobs of one application meet the
# same ones again and again (a Pollux workload of 160 jobs: 2,264 fits, 1,003 distinct), so a
# replay memoizes them: the same numbers, computed once.
@lru_cache(maxsize=1 << 16)
def _fit(points: tuple[tuple[float, ...], ...], start: ThroughputParams | None) -> ThroughputParams:
    """fit_throughput_params over (nodes, replicas, local batch, step, sync) points, in order."""
    n, r, m, step, sync = np.array(points, dtype=float).T
    return fit_throughput_params(n, r, m, step, sync, restarts=0, start=start)


def _best_split(params: ThroughputParams, grad: GradStats, limits: BatchLimits, num_nodes: int,
                num_replicas: int) -> BatchSplit:
    """models.efficiency.best_batch of one shape, its grid's throughput computed once per model:
    a job's gradient statistics change every epoch, its model only when it is refitted.

    Remembered by the objects' identities, not their values: an agent asks every epoch it
    crosses (99 % of asks repeat one), with the same parameters (until a refit) and the
    gradient statistics _epoch_gain keeps, and hashing three dataclasses by value was most of
    an ask. The objects are held with the answer, so their ids are not reused."""
    key = (id(params), id(grad), id(limits), num_nodes, num_replicas)
    hit = _SPLITS.get(key)
    if hit is not None and hit[0] is params and hit[1] is grad and hit[2] is limits:
        return hit[3]
    grid, grid_throughput = _grid_throughput(params, limits, num_nodes, num_replicas)
    choice = best_on_grid(grid, grid_throughput, grad, limits.init_bsz, np.array([num_replicas]))
    split = BatchSplit(int(choice.local_bsz[0]), int(choice.accum_steps[0]))
    if len(_SPLITS) >= SPLIT_MEMO_SIZE:
        _SPLITS.clear()
    _SPLITS[key] = (params, grad, limits, split)
    return split


SPLIT_MEMO_SIZE = 1 << 16  # starts over when full
_SPLITS: dict[tuple[int, ...], tuple[ThroughputParams, GradStats, BatchLimits, BatchSplit]] = {}


@lru_cache(maxsize=1 << 12)
def _grid_throughput(params: ThroughputParams, limits: BatchLimits, num_nodes: int,
                     num_replicas: int) -> tuple[BatchGrid, np.ndarray]:
    n, r = np.array([num_nodes]), np.array([num_replicas])
    grid = batch_grid(limits, r, np.zeros(1))
    return grid, throughput(params, n, r, grid.micro, grid.accum)


# A world's (tau, sync scale, across-node factor) on a job's GPUs (sim.world); None: as measured
StepScale = Callable[[tuple[GpuRef, ...]], tuple[float, float, float] | None]


def _scaled(step: float, sync: float, factors: tuple[float, float, float] | None) -> tuple[float, float]:
    """The measured step and sync on a world's GPUs: compute x tau, sync x its spread's scale, the
    whole x the across-node factor (sim.world); as measured where the world changes nothing."""
    if factors is None:
        return step, sync
    tau, sync_scale, spread = factors
    return ((step - sync) * tau + sync * sync_scale) * spread, sync * sync_scale * spread


def _recorded(step: float, sync: float, speed: float) -> tuple[float, float]:
    """A measured step as an agent that knows its GPUs run `speed` times a T4's records it: the
    compute at the T4's speed, the sync as measured (as measured at speed 1)."""
    if speed == 1.0:
        return step, sync
    return (step - sync) * speed + sync, sync


def advance(state: JobState, truth: ApplicationTruth, agent: JobAgent, fixed_bsz: int | None,
            now_s: float, seconds: float, freezing: Freezing | None = None,
            scale: StepScale | None = None, recorded_speed: float = 1.0) -> JobState:
    """The job's state `seconds` after `now_s` under its current allocation (and freeze level);
    `scale(gpus)` gives the world's (tau, sync scale, across-node factor) on those GPUs; its agent
    records what it measures at `recorded_speed` (sim.view.GPU_TYPE_VIEWS: 1, as measured, but
    for a type-aware policy's jobs on another type than the T4).

    The loop runs once per epoch crossed (short epochs: several per round), so it keeps the
    state in locals and looks its per-(batch, epoch) numbers up in caches."""
    r = len(state.gpus)
    if r == 0 or state.done:
        return state
    delay = min(state.rescale_left_s, seconds)
    progress, epoch, split, grad = state.progress, state.epoch, state.split, state.grad
    assert split is not None, "a job on GPUs has its batch split (reallocate chose it)"
    attained, spent, completion = state.attained_gpu_s + delay * r, state.penalty_spent, None
    now_s, seconds = now_s + delay, seconds - delay
    factors = scale(state.gpus) if scale is not None else None
    placement = state.placement
    measured_bsz, measured = 0, (0.0, 0.0)
    while seconds > 0 and completion is None:
        total = split.total_bsz(r)
        if split.local_bsz != measured_bsz:  # the step and the agent's record of it change with the micro-batch only
            measured_bsz = split.local_bsz
            measured = _scaled(*truth.step_sync_s(placement, measured_bsz), factors)
            agent.observe(len(placement), r, measured_bsz, *_recorded(*measured, recorded_speed))
        step, sync = measured
        pi = 0.0
        if freezing is not None and state.frozen_groups:
            step, sync = frozen_step_sync_s(step, sync, freezing.groups, state.frozen_groups)
            phi = frozen_fraction(freezing.groups, state.frozen_groups)
            pi = float(penalty(freezing.penalty, phi, progress / truth.completion_progress))
        step_s = step + (step - sync) * split.accum_steps
        grad, epoch_gain = _epoch_gain(truth, total, epoch)
        rate = epoch_gain * (1.0 - pi) / step_s
        target = truth.progress_at_epoch(epoch + 1)
        dt = (target - progress) / rate
        if dt > seconds:
            gained = rate * seconds
            progress += gained
            attained += seconds * r
            seconds = 0.0
        else:
            gained = target - progress
            now_s += dt
            epoch += 1
            progress = target
            attained += dt * r
            completion = now_s if epoch >= truth.max_epochs else None
            seconds -= dt
        if pi:
            spent += pi * gained / truth.completion_progress
        if agent.adaptive and completion is None:
            split = agent.choose_split(len(placement), r, grad, fixed_bsz)
    return replace(state, rescale_left_s=state.rescale_left_s - delay, progress=progress, epoch=epoch, split=split,
                   grad=grad, attained_gpu_s=attained, penalty_spent=spent, completion_s=completion)


@lru_cache(maxsize=1 << 16)
def _epoch_gain(truth: ApplicationTruth, total_bsz: int, epoch: int) -> tuple[GradStats, float]:
    """The true gradient statistics of `epoch` at this batch and the progress one step makes."""
    grad = truth.grad_stats(total_bsz, epoch)
    return grad, float(gain(grad, truth.init_bsz, total_bsz))


def advance_work(state: JobState, speed: float, now_s: float, seconds: float, round_end: bool) -> JobState:
    """A job of fixed work (PAL's simulator): after its restart delay it does `speed` seconds of
    work per second; done when its work is, at that instant or, with `round_end`, at the end of
    this round (the artifact records completions at its next round)."""
    work_s = state.job.work_s
    assert work_s is not None, "advance_work is for jobs of fixed work"
    return advance_to(state, work_s, speed, now_s, seconds, round_end)


def advance_to(state: JobState, total: float, rate: float, now_s: float, seconds: float, round_end: bool) -> JobState:
    """A job that is done when its progress reaches `total`: after its restart delay it makes
    `rate` progress per second on its GPUs; done at that instant or, with `round_end`, at the
    end of this round."""
    r = len(state.gpus)
    if r == 0 or state.done:
        return state
    delay = min(state.rescale_left_s, seconds)
    left = total - state.progress
    run_s = seconds - delay
    if left > run_s * rate:
        return replace(state, progress=state.progress + run_s * rate, rescale_left_s=state.rescale_left_s - delay,
                       attained_gpu_s=state.attained_gpu_s + seconds * r)
    busy_s = seconds if round_end else delay + left / rate
    return replace(state, progress=total, rescale_left_s=0.0, attained_gpu_s=state.attained_gpu_s + busy_s * r,
                   completion_s=now_s + busy_s)


def reallocate(state: JobState, agent: JobAgent, gpus: tuple[GpuRef, ...], fixed_bsz: int | None,
               restart_delay_s: float) -> JobState:
    """Move the job onto `gpus` (empty: preempt it); a start or move costs the restart delay."""
    if not gpus:
        return replace(state, gpus=(), split=None)
    moved = replace(state, gpus=gpus, rescale_left_s=restart_delay_s, num_allocations=state.num_allocations + 1)
    return replace(moved, split=agent.choose_split(len(moved.placement), len(gpus), moved.grad, fixed_bsz))


def remaining_steps(state: JobState, truth: ApplicationTruth, total_bsz: int | None) -> float:
    """True optimizer steps left: at a fixed total batch, Optimus+Oracle's estimate indexed as
    the artifact does (iterations at the completion epoch minus those at the current one);
    without one, the progress left in steps at the initial batch (Pollux's progress unit)."""
    if total_bsz is None:
        return max(truth.completion_progress - state.progress, 0.0)
    last = truth.max_epochs - 1
    if state.epoch >= last:
        return 1.0
    return truth.iterations(total_bsz, last) - truth.iterations(total_bsz, state.epoch)


# Every job of a request (application, GPUs, batch) has the same isolated time: the 82,247 jobs
# of the Philly trace make 16 requests, and each walks every epoch once, not once per job.
@lru_cache(maxsize=1 << 12)
def isolated_time_s(truth: ApplicationTruth, placement: tuple[int, ...], total_bsz: int) -> float:
    """Time to train from scratch alone on `placement` at a fixed batch, with no restart."""
    r = sum(placement)
    split = truth.split_fixed_batch(total_bsz, r)
    total = split.total_bsz(r)
    step_s = truth.step_time_s(placement, split)
    seconds = 0.0
    for epoch in range(truth.max_epochs):
        rate = float(gain(truth.grad_stats(total, epoch), truth.init_bsz, total)) / step_s
        seconds += (truth.progress_at_epoch(epoch + 1) - truth.progress_at_epoch(epoch)) / rate
    return seconds
