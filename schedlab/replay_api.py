"""Replays by name: a trace, a policy and a world in, a ReplayResult out.

`replay` is the public entry point (`schedlab.replay(...)`) and what `schedlab replay` runs;
`setup` resolves the names into what the engine takes (sim.engine.replay), for callers that
watch the replay as it runs (the CLI's progress bar) or wrap its policy (schedlab record).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from schedlab.clusters import as_pools
from schedlab.errors import ConfigError
from schedlab.policies import make_policy
from schedlab.policies.base import Policy
from schedlab.sim.engine import ReplayResult, one_blas_thread
from schedlab.sim.engine import replay as run_replay
from schedlab.sim.jobs import TraceJob
from schedlab.sim.world import WORLDS, ReplayConfig
from schedlab.trace_specs import TraceSpec, as_trace_spec

__all__ = ["ReplaySetup", "replay", "setup"]


@dataclass(frozen=True)
class ReplaySetup:
    """A replay ready to run: its jobs, its policy, its world, and what to call its trace."""

    jobs: tuple[TraceJob, ...]
    policy: Policy
    config: ReplayConfig
    title: str

    def run(self, on_round: Callable[[float, int], None] | None = None) -> ReplayResult:
        """Replay it (sim.engine.replay); `on_round(now_s, jobs_done)` after every round."""
        return run_replay(self.jobs, self.policy, self.config, on_round)


def setup(trace: Any, policy: str | Policy, world: str = "pollux", *, seed: int = 0, max_jobs: int | None = None,
          load: float = 1.0, cluster: Any = None, **options: Any) -> ReplaySetup:
    """The jobs, policy and world `replay` runs, its parameters resolved and checked (see replay)."""
    if world not in WORLDS:
        raise ConfigError(f"world {world!r}: use one of {', '.join(WORLDS)}")
    if cluster is not None:
        options = options | {"pools": as_pools(cluster, "cluster")}
    config = WORLDS[world].with_options(**{"seed": seed, "freeze_seed": seed} | options)
    if max_jobs is not None and max_jobs < 1 or not load > 0:
        raise ConfigError(f"max_jobs {max_jobs} must be >= 1 (or None: all) and load {load} > 0")
    spec: TraceSpec = as_trace_spec(trace)
    with one_blas_thread():  # sampling requests interpolates tiny tables: spinning BLAS threads made it 4x slower
        jobs = spec.replay_jobs(config, np.random.default_rng(seed), max_jobs, load)
    config = replace(config, horizon_s=spec.horizon_s(jobs, config))
    return ReplaySetup(jobs, make_policy(policy) if isinstance(policy, str) else policy, config, spec.title)


def replay(trace: Any, policy: str | Policy, world: str = "pollux", *, seed: int = 0, max_jobs: int | None = None,
           load: float = 1.0, on_round: Callable[[float, int], None] | None = None, cluster: Any = None,
           **options: Any) -> ReplayResult:
    """Replay a trace round by round under a scheduling policy, as `schedlab replay` does.

    Parameters
    ----------
    trace : str, pathlib.Path, pandas.DataFrame or TraceSpec
        A shipped Pollux workload's name ("workload-1" to "workload-8") or a CSV path in its
        format; a DataFrame with its columns (name, time, application, num_replicas,
        batch_size); or a spec from schedlab.trace_specs (a Sia-Philly trace, a synthetic or
        Philly-sampled workload, the Philly trace at its real timestamps).
    policy : str or Policy
        A policy of the registry by name ("pollux", "tiresias", "pal", "tiresias+pal", ...;
        schedlab.policies.policy_names()) or a policy object.
    world : str
        The simulated world (schedlab.sim.world.WORLDS): "pollux" (the Pollux artifact's
        simulator), "pal" (PAL's), "variability" (Pollux's on PAL's measured GPUs and racks) or
        "gavel" (Gavel's simulator: rigid jobs of its traces on 36 V100 + 36 P100 + 36 K80,
        schedlab.sim.gavel; trace a schedlab.trace_specs.GavelTrace).
    seed : int
        Seeds what the trace draws (applications, arrivals), the cluster's measured GPUs and
        which jobs opt in to layer freezing; 0, as `schedlab replay`.
    max_jobs : int, optional
        Replay only the first this many jobs by submit time.
    load : float
        Submit times are divided by it (the Pollux artifact's jobload).
    on_round : callable, optional
        Called as on_round(now_s, jobs_done) after every round.
    cluster : str or list, optional
        Node pools of several GPU types instead of the world's one pool: "t4:6x4,v100:5x4,k80:5x4"
        (TYPE:NODESxGPUS), Gavel's "36:36:36" (V100:P100:K80 GPUs), or a list of
        {gpu_type, num_nodes, gpus_per_node} tables (schedlab.clusters.as_pools). The world's
        racks and variability apply over every pool. In the Pollux worlds every type is the T4 or
        one derived from it (schedlab.models.type_speeds); sia and joint see each job's model per
        type, pollux one model on every type (a policy's `type_blind`, schedlab.sim.view.GPU_TYPE_VIEWS).
    **options
        Fields of the world's ReplayConfig or of its cluster (schedlab.clusters.ClusterSpec) to
        change, e.g. num_nodes=4, gpus_per_node=8, round_s=30.0, throughput_model="oracle".

    Returns
    -------
    ReplayResult
        `jobs`: a DataFrame with one row per job (name, application, submit_s, completion_s,
        jct_s, restarts, attained_gpu_s, ftf, ...); `rounds`: a DataFrame with one row per
        scheduling round (time_s, active_jobs, running_jobs, gpus_used, solve_ms, status,
        objective); `summary`: the metrics `schedlab replay` prints (mean_jct_s, makespan_s,
        utilization, ...). The horizon is the world's, counted from the last submission.

    Raises
    ------
    schedlab.SchedlabError
        A name, option or trace that does not exist or does not fit, with how to fix it.

    Examples
    --------
    The first 8 jobs of the shipped workload-6 under Tiresias, in the Pollux artifact's world
    on 4 nodes of 4 GPUs:

    >>> import schedlab
    >>> result = schedlab.replay("workload-6", "tiresias", max_jobs=8, num_nodes=4)
    >>> len(result.jobs), result.summary["jobs_completed"]
    (8, 8)
    >>> list(result.jobs.columns[:5])
    ['name', 'application', 'submit_s', 'completion_s', 'jct_s']
    >>> bool((result.rounds.gpus_used <= 16).all())
    True
    >>> bool(result.jobs.jct_s.mean() == result.summary["mean_jct_s"])
    True

    The same jobs under Sia on a cluster of T4s and V100s:

    >>> mixed = schedlab.replay("workload-6", "sia", max_jobs=8, cluster="t4:2x4,v100:2x4")
    >>> mixed.summary["jobs_completed"]
    8
    """
    return setup(trace, policy, world, seed=seed, max_jobs=max_jobs, load=load, cluster=cluster, **options).run(on_round)
