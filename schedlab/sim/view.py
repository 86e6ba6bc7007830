"""What a policy sees of a replayed job: its rules, its throughput model, its JobSpec.

A policy declares how its jobs pick their batch (`batch_mode`, policies.base) and which model of
their speed it values them with (`throughput_model`). Each declared name is a key of a registry
here, so the engine asks the declared behaviour, never the name:
  BATCH_MODES        adaptive (Pollux's agent: the job re-picks its batch from its own model;
                     NCF pinned to one GPU at batch 32768, as the artifact pins it), fixed (the
                     submitted batch, up to the GPUs that batch spreads over), allocated (ONES:
                     the batch the policy allocates, at most 4x the GPUs requested)
  THROUGHPUT_MODELS  online (the model fitted to what the job has measured, at most twice the
                     GPUs it has run on: Pollux's exploration rule), oracle (the measured tables)
  GPU_TYPE_VIEWS     what a policy sees of the cluster's GPU types (a policy declares
                     `type_blind = False` to see them; one that declares nothing knows one type):
                     aware (the job's model on each type, projected by the application's speed
                     ratio to the T4, models.type_speeds: Sia's profiling of each job on each type,
                     and its agent records what it measures at the T4's speed), blind (the job's one
                     model on every type, as Pollux, which knows one type, sees a mixed cluster)
On a cluster of T4s only both views give every job its one model, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from schedlab.errors import ConfigError
from schedlab.models.profiles import POLLUX_GPU_TYPE, shipped_profiles
from schedlab.models.type_speeds import project_params, speed_ratio
from schedlab.sim.jobs import Freezing, JobAgent, JobState, TraceJob
from schedlab.sim.truth import ApplicationTruth
from schedlab.state import FreezeSpec, GradStats, JobAllocation, JobSpec, ThroughputParams

__all__ = ["BATCH_MODES", "GPU_TYPE_VIEWS", "MAX_REPLICAS", "THROUGHPUT_MODELS", "BatchMode", "JobRules", "ModelView",
           "TypeView", "View", "batch_mode", "gpu_type_view", "job_spec", "online_view", "oracle_view", "sees_gpu_types",
           "throughput_view"]

# What a job's model says before it has measured anything: Pollux's initial parameter guess
# and gradient statistics that make larger batches worth nothing (gain 1).
PRIOR_PARAMS = ThroughputParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.0)
PRIOR_GRAD = GradStats(sqr=1.0, var=0.0)
PINNED_ADAPTIVE = {"ncf": (1, 32768)}  # application -> (GPUs, total batch) under adaptive policies
MAX_REPLICAS = 64  # the artifact's simulator cap


@dataclass(frozen=True)
class JobRules:
    """How a job is presented to a policy and runs under it.

    Parameters
    ----------
    fixed_bsz
        The total batch it trains at; None: the job or the policy chooses it.
    max_gpus
        Its GPU cap; None: Pollux's exploration rule (THROUGHPUT_MODELS).
    adaptive
        Whether the job re-picks its batch from its own model after every epoch.
    """

    fixed_bsz: int | None
    max_gpus: int | None
    adaptive: bool = False


class BatchMode(Protocol):
    """The behaviour a policy's declared batch_mode gives the jobs that train to an epoch."""

    def rules(self, job: TraceJob, truth: ApplicationTruth, total_gpus: int) -> JobRules:
        """The job's batch and GPU cap under this mode."""
        ...

    def batch_on_move(self, allocation: JobAllocation, rules: JobRules) -> int | None:
        """The total batch a job runs at on the GPUs it is moved to (None: its agent picks)."""
        ...


class _Adaptive:
    def rules(self, job: TraceJob, truth: ApplicationTruth, total_gpus: int) -> JobRules:
        if job.application in PINNED_ADAPTIVE:
            gpus, bsz = PINNED_ADAPTIVE[job.application]
            return JobRules(bsz, gpus)
        return JobRules(None, None, adaptive=True)

    def batch_on_move(self, allocation: JobAllocation, rules: JobRules) -> int | None:
        return rules.fixed_bsz


class _Fixed:
    def rules(self, job: TraceJob, truth: ApplicationTruth, total_gpus: int) -> JobRules:
        cap = max(job.batch_size // truth.min_local_bsz, job.num_replicas)
        return JobRules(job.batch_size, min(cap, total_gpus))

    def batch_on_move(self, allocation: JobAllocation, rules: JobRules) -> int | None:
        return rules.fixed_bsz


class _Allocated:
    def rules(self, job: TraceJob, truth: ApplicationTruth, total_gpus: int) -> JobRules:
        return JobRules(None, min(4 * job.num_replicas, truth.max_bsz // truth.min_local_bsz, total_gpus))

    def batch_on_move(self, allocation: JobAllocation, rules: JobRules) -> int | None:
        return allocation.total_bsz


BATCH_MODES: dict[str, BatchMode] = {"adaptive": _Adaptive(), "fixed": _Fixed(), "allocated": _Allocated()}


def batch_mode(declared: str) -> BatchMode:
    """The behaviour of a policy's declared batch_mode."""
    if declared not in BATCH_MODES:
        raise ConfigError(f"batch_mode {declared!r}: a policy declares one of {', '.join(BATCH_MODES)}")
    return BATCH_MODES[declared]


@dataclass(frozen=True)
class ModelView:
    """A job's throughput model as a policy sees it, and the GPUs it may explore."""

    params: ThroughputParams
    grad: GradStats
    explore_gpus: int


def online_view(state: JobState, agent: JobAgent, truth: ApplicationTruth) -> ModelView:
    """The model the job fitted to what it measured (a prior before that), at most twice the GPUs
    it has run on."""
    return ModelView(agent.params or PRIOR_PARAMS, state.grad or PRIOR_GRAD, max(2 * agent.max_profiled_replicas, 1))


def oracle_view(state: JobState, agent: JobAgent, truth: ApplicationTruth) -> ModelView:
    """The model fitted to the full measured tables and the job's true gradient statistics."""
    grad = truth.grad_stats(state.total_bsz or truth.init_bsz, min(state.epoch, truth.max_epochs - 1))
    return ModelView(shipped_profiles()[state.job.application].params, grad, MAX_REPLICAS)


View = Callable[[JobState, JobAgent, ApplicationTruth], ModelView]
THROUGHPUT_MODELS: dict[str, View] = {"online": online_view, "oracle": oracle_view}


def throughput_view(name: str) -> View:
    """How a policy sees a job's speed under the throughput model `name`."""
    if name not in THROUGHPUT_MODELS:
        raise ConfigError(f"throughput_model {name!r}: use {' or '.join(THROUGHPUT_MODELS)}")
    return THROUGHPUT_MODELS[name]


class TypeView(Protocol):
    """What a policy sees of a job's model on each GPU type of the cluster, and how its agent records."""

    def per_type(self, params: ThroughputParams, application: str, gpu_types: frozenset[str]) -> dict[str, ThroughputParams]:
        """The job's parameters on each of `gpu_types`, from its model at the T4's speed."""
        ...

    def recorded_speed(self, application: str, type_speed: float) -> float:
        """The speed its agent divides what it measures by, on GPUs of `type_speed` (1: as measured)."""
        ...


class _Aware:
    def per_type(self, params: ThroughputParams, application: str, gpu_types: frozenset[str]) -> dict[str, ThroughputParams]:
        return {t: project_params(params, speed_ratio(application, t)) for t in sorted(gpu_types)}

    def recorded_speed(self, application: str, type_speed: float) -> float:
        return type_speed


class _Blind:
    def per_type(self, params: ThroughputParams, application: str, gpu_types: frozenset[str]) -> dict[str, ThroughputParams]:
        return dict.fromkeys(sorted(gpu_types), params)

    def recorded_speed(self, application: str, type_speed: float) -> float:
        return 1.0


GPU_TYPE_VIEWS: dict[bool, TypeView] = {True: _Aware(), False: _Blind()}


def sees_gpu_types(policy: object) -> bool:
    """Whether `policy` declares `type_blind` false (a policy that declares nothing knows one type)."""
    return not getattr(policy, "type_blind", True)


def gpu_type_view(policy: object) -> TypeView:
    """The view of GPU types `policy` declares (sees_gpu_types)."""
    return GPU_TYPE_VIEWS[sees_gpu_types(policy)]


def _freeze_spec(state: JobState, truth: ApplicationTruth, freezing: Freezing | None) -> FreezeSpec | None:
    if freezing is None:
        return None
    return FreezeSpec(groups=freezing.groups, progress=min(state.progress / truth.completion_progress, 1.0),
                      total_steps=truth.completion_progress, budget_left=max(freezing.budget - state.penalty_spent, 0.0),
                      penalty=freezing.penalty)


def job_spec(state: JobState, view: ModelView, truth: ApplicationTruth, rules: JobRules, remaining_steps: float,
             now_s: float, total_gpus: int, freezing: Freezing | None = None,
             throughput: dict[str, ThroughputParams] | None = None) -> JobSpec:
    """The job as a round presents it: its model (`throughput` per GPU type, else its model on the
    T4 alone), batch limits, GPUs, age and baselines' hints."""
    job = state.job
    cap = rules.max_gpus or min(view.explore_gpus, MAX_REPLICAS, truth.max_bsz // truth.min_local_bsz)
    return JobSpec(
        id=job.name,
        throughput=throughput if throughput is not None else {POLLUX_GPU_TYPE: view.params},
        grad_stats=view.grad,
        batch=truth.limits,
        min_gpus=1,
        max_gpus=min(cap, total_gpus),
        current_gpus=state.gpus,
        age_s=now_s - job.submit_s,
        num_restarts=state.num_restarts,
        fixed_bsz=rules.fixed_bsz,
        application=job.application,
        requested_gpus=job.num_replicas,
        requested_bsz=job.batch_size,
        attained_service_gpu_s=state.attained_gpu_s,
        remaining_steps=remaining_steps,
        freezing=_freeze_spec(state, truth, freezing),
        app_class=job.app_class,
    )
