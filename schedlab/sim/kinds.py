"""The two kinds of replayed job, each a strategy the engine calls without asking which it is.

EpochTarget  a Pollux workload's job: it trains until its completion epoch, each step worth its
             batch's statistical gain (sim.jobs.advance); its batch and GPU cap follow the
             policy's batch mode, its model the replay's throughput model (sim.view).
FixedWork    a Sia-Philly job in PAL's semantics: a fixed work, TraceJob.work_s seconds at full
             speed on its requested GPUs, done at 1 / (slowest GPU's factor x across-node factor)
             of full speed, times the measured scaling of a GPU count other than the requested
             one (sim.jobs.advance_work); it trains at its submitted batch whatever the policy,
             valued by the measured tables, and must fit the cluster.
`job_kind(job)` picks a job's kind once, from its trace record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from schedlab.errors import ConfigError
from schedlab.sim.jobs import (
    Freezing,
    JobAgent,
    JobState,
    StepScale,
    TraceJob,
    advance,
    advance_work,
    isolated_time_s,
    remaining_steps,
)
from schedlab.sim.truth import ApplicationTruth
from schedlab.sim.view import BatchMode, JobRules, View, oracle_view, throughput_view
from schedlab.state import GpuRef, ThroughputParams, variability_class

if TYPE_CHECKING:
    from schedlab.sim.world import ReplayConfig, World

__all__ = ["EpochTarget", "FixedWork", "JobKind", "JobRun", "job_kind", "work_speed"]


@dataclass(frozen=True)
class JobRun:
    """What stays fixed for a job through a replay: its kind, its application's true behaviour,
    its rules, its own agent (which learns), how the policy sees its speed, its opt-in to
    freezing, how the world scales its steps (None where the world changes nothing), how the
    policy sees it on each GPU type, and the speed its agent records at on given GPUs
    (sim.view.GPU_TYPE_VIEWS)."""

    kind: JobKind
    truth: ApplicationTruth
    rules: JobRules
    agent: JobAgent
    view: View
    freezing: Freezing | None
    scale: StepScale | None
    per_type: Callable[[ThroughputParams], dict[str, ThroughputParams]]
    recorded_speed: Callable[[tuple[GpuRef, ...]], float]


class JobKind(Protocol):
    """What the engine asks of a job's kind."""

    def check_fits(self, job: TraceJob, total_gpus: int) -> None:
        """Raise ConfigError if the job can never run on a cluster of `total_gpus`."""
        ...

    def rules(self, job: TraceJob, truth: ApplicationTruth, mode: BatchMode, total_gpus: int) -> JobRules:
        """The job's batch and GPU cap under a policy of batch mode `mode`."""
        ...

    def view(self, throughput_model: str) -> View:
        """How the policy sees the job's speed under the replay's throughput model."""
        ...

    def remaining_steps(self, state: JobState, truth: ApplicationTruth, rules: JobRules) -> float:
        """What the baselines' hint says is left of the job."""
        ...

    def advance(self, state: JobState, run: JobRun, now_s: float, config: ReplayConfig, world: World) -> JobState:
        """The job's state one round after `now_s` on its current GPUs."""
        ...

    def isolated_s(self, job: TraceJob, truth: ApplicationTruth, gpus_per_node: int) -> float:
        """The job's time alone at its request on an empty cluster (finish-time fairness's unit)."""
        ...


@dataclass(frozen=True)
class EpochTarget:
    """A job that trains until its completion epoch (Pollux's simulator)."""

    def check_fits(self, job: TraceJob, total_gpus: int) -> None:
        """Always runs: its policy may give it fewer GPUs than it asked for."""

    def rules(self, job: TraceJob, truth: ApplicationTruth, mode: BatchMode, total_gpus: int) -> JobRules:
        """The policy's batch mode decides."""
        return mode.rules(job, truth, total_gpus)

    def view(self, throughput_model: str) -> View:
        """The replay's throughput model (sim.view.THROUGHPUT_MODELS)."""
        return throughput_view(throughput_model)

    def remaining_steps(self, state: JobState, truth: ApplicationTruth, rules: JobRules) -> float:
        """True optimizer steps left (sim.jobs.remaining_steps)."""
        return remaining_steps(state, truth, rules.fixed_bsz)

    def advance(self, state: JobState, run: JobRun, now_s: float, config: ReplayConfig, world: World) -> JobState:
        """Epoch by epoch, with its agent re-picking the batch if adaptive (sim.jobs.advance)."""
        speed = run.recorded_speed(state.gpus) if state.gpus else 1.0
        return advance(state, run.truth, run.agent, run.rules.fixed_bsz, now_s, config.round_s, run.freezing, run.scale,
                       speed)

    def isolated_s(self, job: TraceJob, truth: ApplicationTruth, gpus_per_node: int) -> float:
        """From scratch at its requested GPUs, packed on the fewest nodes, and batch."""
        packed = tuple(min(gpus_per_node, job.num_replicas - k) for k in range(0, job.num_replicas, gpus_per_node))
        return isolated_time_s(truth, packed, job.batch_size)


@dataclass(frozen=True)
class FixedWork:
    """A job of `work_s` seconds of work at full speed on its requested GPUs (PAL's simulator)."""

    work_s: float

    def check_fits(self, job: TraceJob, total_gpus: int) -> None:
        """It runs at its requested GPU count or waits: that count must exist."""
        if job.num_replicas > total_gpus:
            raise ConfigError(f"job {job.name} needs {job.num_replicas} GPUs, the cluster has {total_gpus}; "
                              "use a larger cluster")

    def rules(self, job: TraceJob, truth: ApplicationTruth, mode: BatchMode, total_gpus: int) -> JobRules:
        """Its submitted batch whatever the policy, up to the GPUs that batch spreads over."""
        return JobRules(job.batch_size, min(truth.max_bsz // truth.min_local_bsz, total_gpus))

    def view(self, throughput_model: str) -> View:
        """The measured tables, whatever the replay's throughput model."""
        return oracle_view

    def remaining_steps(self, state: JobState, truth: ApplicationTruth, rules: JobRules) -> float:
        """Seconds of work left at full speed."""
        return self.work_s - state.progress

    def advance(self, state: JobState, run: JobRun, now_s: float, config: ReplayConfig, world: World) -> JobState:
        """At its work speed on its GPUs (work_speed), done at once or at the round's end."""
        if not state.gpus or state.done:
            return state
        speed = work_speed(state, run.truth, world, config.cluster.gpus_per_node)
        return advance_work(state, speed, now_s, config.round_s, config.finish_at_round_end)

    def isolated_s(self, job: TraceJob, truth: ApplicationTruth, gpus_per_node: int) -> float:
        """Its work: the time it takes at full speed on its requested GPUs."""
        return self.work_s


def job_kind(job: TraceJob) -> JobKind:
    """A job of fixed work if its trace record gives one, else a job that trains to its epoch."""
    return EpochTarget() if job.work_s is None else FixedWork(job.work_s)


def work_speed(state: JobState, truth: ApplicationTruth, world: World, gpus_per_node: int) -> float:
    """Seconds of work per second of a job of fixed work on its GPUs: the measured scaling of its
    GPU count against the requested one (1 at the request), over its slowest GPU's true factor
    (over its GPU type's speed, sim.world) and the across-node factor."""
    job, r = state.job, len(state.gpus)
    scale = 1.0
    if r != job.num_replicas:
        packed = lambda n: tuple(min(gpus_per_node, n - k) for k in range(0, n, gpus_per_node))  # noqa: E731
        scale = (truth.step_time_s(packed(job.num_replicas), truth.split_fixed_batch(job.batch_size, job.num_replicas))
                 / truth.step_time_s(packed(r), truth.split_fixed_batch(job.batch_size, r)))
    cls = variability_class(job.application, job.app_class)
    return scale / (world.compute_factor(state.gpus, cls, job.application) * world.spread_factor(state.gpus))
