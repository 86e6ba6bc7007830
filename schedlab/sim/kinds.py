"""The kinds of replayed job, each a strategy the engine calls without asking which it is.

EpochTarget  a Pollux workload's job: it trains until its completion epoch, each step worth its
             batch's statistical gain (sim.jobs.advance); its batch and GPU cap follow the
             policy's batch mode, its model the replay's throughput model (sim.view).
FixedWork    a Sia-Philly job in PAL's semantics: a fixed work, TraceJob.work_s seconds at full
             speed on its requested GPUs, done at 1 / (slowest GPU's factor x across-node factor)
             of full speed, times the measured scaling of a GPU count other than the requested
             one (sim.jobs.advance_work); it trains at its submitted batch whatever the policy,
             valued by the measured tables, and must fit the cluster.
RigidSteps   a job of Gavel's trace in Gavel's semantics (sim.gavel): TraceJob.steps steps of its
             job type on exactly its scale factor's GPUs of one type, at the table's rate for
             their type and whether they share a node; valued by Pollux's model fitted to the
             table per GPU type, whatever the replay's throughput model.
`job_kind(job)` picks a job's kind once, from its trace record. A kind knows its own truth (the
engine hands it back to the kind's methods, never reads it) and presents its job to a round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from schedlab.clusters import ClusterSpec
from schedlab.errors import ConfigError
from schedlab.models.throughput import MeasuredTable
from schedlab.sim.gavel import GavelTruth, gavel_spec, gavel_truth
from schedlab.sim.jobs import (
    Freezing,
    JobAgent,
    JobState,
    StepScale,
    TraceJob,
    advance,
    advance_to,
    advance_work,
    isolated_time_s,
    remaining_steps,
)
from schedlab.sim.truth import ApplicationTruth, application_truth, calibrated_truth
from schedlab.sim.view import BatchMode, JobRules, View, job_spec, oracle_view, throughput_view
from schedlab.state import GpuRef, JobSpec, ThroughputParams, variability_class

if TYPE_CHECKING:
    from schedlab.sim.world import ReplayConfig, World

__all__ = ["EpochTarget", "FixedWork", "JobKind", "JobRun", "RigidSteps", "job_kind", "work_speed"]

T = TypeVar("T")  # a kind's truth: what its job really does


@dataclass(frozen=True)
class JobRun(Generic[T]):
    """What stays fixed for a job through a replay: its kind, its true behaviour, its rules, its
    own agent (which learns), how the policy sees its speed (None: the kind values the job
    itself), its opt-in to freezing, how the world scales its steps (None where the world
    changes nothing), how the policy sees it on each GPU type, and the speed its agent records
    at on given GPUs (sim.view.GPU_TYPE_VIEWS)."""

    kind: JobKind[T]
    truth: T
    rules: JobRules
    agent: JobAgent
    view: View | None
    freezing: Freezing | None
    scale: StepScale | None
    per_type: Callable[[ThroughputParams], dict[str, ThroughputParams]]
    recorded_speed: Callable[[tuple[GpuRef, ...]], float]


class JobKind(Protocol[T]):
    """What the engine asks of a job's kind."""

    def truth(self, job: TraceJob, calibration: Mapping[str, MeasuredTable]) -> T:
        """What the job really does; `calibration` maps an application to its calibrated table."""
        ...

    def check_fits(self, job: TraceJob, cluster: ClusterSpec) -> None:
        """Raise ConfigError if the job can never run on `cluster`."""
        ...

    def rules(self, job: TraceJob, truth: T, mode: BatchMode, total_gpus: int) -> JobRules:
        """The job's batch and GPU cap under a policy of batch mode `mode`."""
        ...

    def view(self, throughput_model: str) -> View | None:
        """How the policy sees the job's speed under the replay's throughput model."""
        ...

    def spec(self, state: JobState, run: JobRun[T], now_s: float, total_gpus: int) -> JobSpec:
        """The job as this round presents it to the policy."""
        ...

    def remaining_steps(self, state: JobState, truth: T, rules: JobRules) -> float:
        """What the baselines' hint says is left of the job."""
        ...

    def advance(self, state: JobState, run: JobRun[T], now_s: float, config: ReplayConfig, world: World) -> JobState:
        """The job's state one round after `now_s` on its current GPUs."""
        ...

    def isolated_s(self, job: TraceJob, truth: T, gpus_per_node: int) -> float:
        """The job's time alone at its request on an empty cluster (finish-time fairness's unit)."""
        ...


def _application_truth(job: TraceJob, calibration: Mapping[str, MeasuredTable]) -> ApplicationTruth:
    """A Pollux application's measurements, or its calibrated table's where one is given."""
    table = calibration.get(job.application)
    return calibrated_truth(job.application, table) if table is not None else application_truth(job.application)


def _application_spec(state: JobState, run: JobRun[ApplicationTruth], now_s: float, total_gpus: int) -> JobSpec:
    """A Pollux application's job as its view shows it (sim.view.job_spec)."""
    assert run.view is not None, "the kinds of Pollux applications have a view"
    view = run.view(state, run.agent, run.truth)
    return job_spec(state, view, run.truth, run.rules, run.kind.remaining_steps(state, run.truth, run.rules), now_s,
                    total_gpus, run.freezing, run.per_type(view.params))


@dataclass(frozen=True)
class EpochTarget:
    """A job that trains until its completion epoch (Pollux's simulator)."""

    def truth(self, job: TraceJob, calibration: Mapping[str, MeasuredTable]) -> ApplicationTruth:
        """Its application's (calibrated) measurements."""
        return _application_truth(job, calibration)

    def check_fits(self, job: TraceJob, cluster: ClusterSpec) -> None:
        """Runs on any GPUs: its policy may give it fewer than it asked for (ReplayConfig checks
        that every type of the cluster is its tables' or one derived from it)."""

    def rules(self, job: TraceJob, truth: ApplicationTruth, mode: BatchMode, total_gpus: int) -> JobRules:
        """The policy's batch mode decides."""
        return mode.rules(job, truth, total_gpus)

    def view(self, throughput_model: str) -> View:
        """The replay's throughput model (sim.view.THROUGHPUT_MODELS)."""
        return throughput_view(throughput_model)

    def spec(self, state: JobState, run: JobRun[ApplicationTruth], now_s: float, total_gpus: int) -> JobSpec:
        """Through its view (sim.view.job_spec)."""
        return _application_spec(state, run, now_s, total_gpus)

    def remaining_steps(self, state: JobState, truth: ApplicationTruth, rules: JobRules) -> float:
        """True optimizer steps left (sim.jobs.remaining_steps)."""
        return remaining_steps(state, truth, rules.fixed_bsz)

    def advance(self, state: JobState, run: JobRun[ApplicationTruth], now_s: float, config: ReplayConfig,
                world: World) -> JobState:
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

    def truth(self, job: TraceJob, calibration: Mapping[str, MeasuredTable]) -> ApplicationTruth:
        """Its stand-in application's (calibrated) measurements."""
        return _application_truth(job, calibration)

    def check_fits(self, job: TraceJob, cluster: ClusterSpec) -> None:
        """It runs at its requested GPU count or waits: that count must exist."""
        if job.num_replicas > cluster.total_gpus:
            raise ConfigError(f"job {job.name} needs {job.num_replicas} GPUs, the cluster has {cluster.total_gpus}; "
                              "use a larger cluster")

    def rules(self, job: TraceJob, truth: ApplicationTruth, mode: BatchMode, total_gpus: int) -> JobRules:
        """Its submitted batch whatever the policy, up to the GPUs that batch spreads over."""
        return JobRules(job.batch_size, min(truth.max_bsz // truth.min_local_bsz, total_gpus))

    def view(self, throughput_model: str) -> View:
        """The measured tables, whatever the replay's throughput model."""
        return oracle_view

    def spec(self, state: JobState, run: JobRun[ApplicationTruth], now_s: float, total_gpus: int) -> JobSpec:
        """Through its view (sim.view.job_spec)."""
        return _application_spec(state, run, now_s, total_gpus)

    def remaining_steps(self, state: JobState, truth: ApplicationTruth, rules: JobRules) -> float:
        """Seconds of work left at full speed."""
        return self.work_s - state.progress

    def advance(self, state: JobState, run: JobRun[ApplicationTruth], now_s: float, config: ReplayConfig,
                world: World) -> JobState:
        """At its work speed on its GPUs (work_speed), done at once or at the round's end."""
        if not state.gpus or state.done:
            return state
        speed = work_speed(state, run.truth, world, config.cluster.gpus_per_node)
        return advance_work(state, speed, now_s, config.round_s, config.finish_at_round_end)

    def isolated_s(self, job: TraceJob, truth: ApplicationTruth, gpus_per_node: int) -> float:
        """Its work: the time it takes at full speed on its requested GPUs."""
        return self.work_s


@dataclass(frozen=True)
class RigidSteps:
    """A job of Gavel's: `steps` steps on exactly its scale factor's GPUs of one type (sim.gavel)."""

    steps: float

    def truth(self, job: TraceJob, calibration: Mapping[str, MeasuredTable]) -> GavelTruth:
        """Its job type's rates at its scale factor (sim.gavel.gavel_truth)."""
        return gavel_truth(job.application, job.num_replicas)

    def check_fits(self, job: TraceJob, cluster: ClusterSpec) -> None:
        """Its GPUs must exist on one GPU type it runs on."""
        truth = gavel_truth(job.application, job.num_replicas)
        if not any(p.gpu_type in truth.throughput for p in cluster.node_pools):
            raise ConfigError(f"job {job.name} ({job.application}) runs on {', '.join(truth.throughput)} GPUs, "
                              f"the cluster has {', '.join(cluster.gpu_types)}; use a cluster of Gavel's GPU types")
        largest = max(sum(p.num_nodes * p.gpus_per_node for p in cluster.node_pools if p.gpu_type == t)
                      for t in truth.throughput)
        if job.num_replicas > largest:
            raise ConfigError(f"job {job.name} needs {job.num_replicas} GPUs of one type, the cluster has at most "
                              f"{largest} of a type it runs on; use a larger cluster")

    def rules(self, job: TraceJob, truth: GavelTruth, mode: BatchMode, total_gpus: int) -> JobRules:
        """Its batch on its scale factor's GPUs, whatever the policy."""
        return JobRules(truth.total_bsz, truth.scale_factor)

    def view(self, throughput_model: str) -> None:
        """None: the job is valued by the table's fits, whatever the replay's throughput model."""

    def spec(self, state: JobState, run: JobRun[GavelTruth], now_s: float, total_gpus: int) -> JobSpec:
        """Its fits per GPU type on exactly its GPUs (sim.gavel.gavel_spec)."""
        return gavel_spec(state, run.truth, self.steps - state.progress, now_s)

    def remaining_steps(self, state: JobState, truth: GavelTruth, rules: JobRules) -> float:
        """Its steps left."""
        return self.steps - state.progress

    def advance(self, state: JobState, run: JobRun[GavelTruth], now_s: float, config: ReplayConfig,
                world: World) -> JobState:
        """At its rate on its GPUs' type, consolidated or not, done at that instant (or the round's end)."""
        if not state.gpus or state.done:
            return state
        cluster = world.truth
        gpu_type = cluster.nodes[cluster.node_index[state.gpus[0].node]].gpu_type
        rate = run.truth.steps_per_s(gpu_type, len({g.node for g in state.gpus}) == 1)
        return advance_to(state, self.steps, rate, now_s, config.round_s, config.finish_at_round_end)

    def isolated_s(self, job: TraceJob, truth: GavelTruth, gpus_per_node: int) -> float:
        """Its steps at its fastest rate: consolidated on its fastest GPU type."""
        return self.steps / truth.best_steps_per_s


def job_kind(job: TraceJob) -> JobKind[Any]:
    """A job of fixed work or Gavel's rigid job where its trace record says so, else a job that
    trains to its epoch."""
    if job.steps is not None:
        return RigidSteps(job.steps)
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
