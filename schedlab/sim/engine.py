"""Round-by-round replay of a workload under any policy of the registry.

Each round (Pollux artifact semantics, simulator.py): every job advances `round_s` seconds under
its current GPUs (its kind's advance, sim.kinds: exact epoch crossings and completion times,
30 s without progress after each start or move); then the policy is called with the jobs that
have arrived and not finished, exactly as an embedding scheduler calls solve_round(): a
RoundInput with the cluster, each job's current GPUs, age, restarts, its throughput model and
gradient statistics, and the hints of baselines (requested GPUs, attained service, remaining
steps). A job whose GPU set changes is reallocated. Jobs that arrive or finish inside a round
wait for the next one.

What the policy sees of a job's speed is, by default, what a real scheduler would: a model
fitted online to the configurations the job has run (`throughput_model="online"`, as Pollux
does); "oracle" hands it the model fitted to the full measured tables (sim.view). How a job's
batch is chosen is the policy's declared batch mode (sim.view.BATCH_MODES).

One engine for every world. The world is data (sim.world: ReplayConfig, WORLDS): the cluster
(what jobs feel of it: sim.world.World), the trace's jobs (Pollux workloads train until their
completion epoch, Sia-Philly jobs in PAL's semantics carry a fixed work: sim.kinds), and the
semantics. Every policy of the registry runs on every world; every round's answer is verified.

Layer freezing (IceFrog-style, models.freezing): a seeded `freeze_opt_in` fraction of the jobs
opt in with a penalty budget; the policy sees each one's progress, training length and budget
left (JobSpec.freezing), and a job runs each round with the groups its allocation froze
(sim.jobs.advance). Policies that do not freeze leave every job at 0.
"""

from __future__ import annotations

import collections
import functools
import gc
import importlib
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from schedlab.clusters import ClusterSpec, make_cluster
from schedlab.errors import ConfigError
from schedlab.io import json_text, spreadsheet_safe
from schedlab.io.outputs import OUTPUT_KINDS, claim_folder
from schedlab.models.freezing import layer_profile
from schedlab.policies.base import Policy
from schedlab.sim.jobs import Freezing, JobAgent, JobState, StepScale, TraceJob, reallocate
from schedlab.sim.kinds import JobRun, job_kind
from schedlab.sim.metrics import summarize
from schedlab.sim.view import BatchMode, TypeView, batch_mode, gpu_type_view
from schedlab.sim.world import WORLDS, ReplayConfig, World
from schedlab.state import GpuRef, JobSpec, RoundInput, variability_class
from schedlab.verify import verify

__all__ = ["ReplayResult", "check_out_dir", "one_blas_thread", "replay", "write_outputs"]


@dataclass(frozen=True)
class ReplayResult:
    """What a replay gives back.

    Attributes
    ----------
    jobs
        One row per job, in trace order: name, application, submit_s, completion_s (NaN if it
        did not finish), jct_s, num_replicas and batch_size (its request), restarts,
        attained_gpu_s, epochs_done, isolated_s and ftf (finish-time fairness), freeze_budget
        and penalty_spent (layer freezing), app_class, work_s (jobs of fixed work).
    rounds
        One row per scheduling round: time_s, active_jobs, solve_ms, status, objective,
        running_jobs, gpus_used (and gpus_used_<type> per GPU type of a mixed cluster).
    summary
        The metrics `schedlab replay` prints (sim.metrics.summarize, and freezing's).
    """

    jobs: pd.DataFrame
    rounds: pd.DataFrame
    summary: dict


def _opt_ins(jobs: tuple[TraceJob, ...], config: ReplayConfig) -> dict[str, Freezing]:
    """The seeded round(freeze_opt_in x jobs) jobs that opt in to freezing."""
    count = round(config.freeze_opt_in * len(jobs))
    picked = np.random.default_rng(config.freeze_seed).choice(len(jobs), size=count, replace=False)
    return {jobs[i].name: Freezing(layer_profile(jobs[i].application), config.freeze_penalty, config.freeze_budget)
            for i in sorted(picked)}


def _step_scale(world: World, app_class: str, application: str) -> StepScale | None:
    """(tau / rho, sync scale, across-node factor) of a world's GPUs for the epoch model; None where
    the world changes nothing (so plain replays keep the measured times bit for bit)."""
    if world.plain:
        return None
    return lambda gpus: world.step_factors(gpus, app_class, application)


def _job_runs(jobs: tuple[TraceJob, ...], mode: BatchMode, config: ReplayConfig, world: World,
              throughput_model: str, types: TypeView) -> dict[str, JobRun]:
    """Each job's kind, truth, rules, agent, model view, opt-in, step scale and view of the GPU
    types, fixed for the replay."""
    calibrated = dict(config.calibration)
    freezing = _opt_ins(jobs, config)
    runs = {}
    for job in jobs:
        kind = job_kind(job)
        kind.check_fits(job, config.cluster)
        truth = kind.truth(job, calibrated)
        rules = kind.rules(job, truth, mode, config.total_gpus)
        app = job.application
        runs[job.name] = JobRun(kind, truth, rules, JobAgent(truth, adaptive=rules.adaptive),
                                kind.view(throughput_model), freezing.get(job.name),
                                _step_scale(world, variability_class(app, job.app_class), app),
                                functools.partial(types.per_type, application=app, gpu_types=world.seen.gpu_types),
                                functools.partial(_recorded_speed, world, types, app))
    return runs


def _recorded_speed(world: World, types: TypeView, application: str, gpus: tuple[GpuRef, ...]) -> float:
    """The speed a job's agent records its measurements at on `gpus` (sim.view.TypeView)."""
    return types.recorded_speed(application, world.type_speed(gpus, application))


def replay(jobs: tuple[TraceJob, ...], policy: Policy, config: ReplayConfig = WORLDS["pollux"],
           on_round: Callable[[float, int], None] | None = None) -> ReplayResult:
    """Replay `jobs` under `policy` in the world `config` (default: the Pollux artifact's);
    `on_round(now_s, jobs_done)` is called after every round.

    BLAS runs single-threaded inside (one_blas_thread).
    """
    with one_blas_thread():
        return _replay(jobs, policy, config, on_round)


@contextmanager
def _set_up_frozen() -> Iterator[None]:
    """What is alive now (a replay's set-up: every job of its trace with its state, truth and
    agent) left out of the cyclic collector's passes until the block ends (gc.freeze). Each full
    pass read them all again: 30 passes of ~250 ms on the Philly trace (82k jobs), 7.6 s of it.
    They are still freed when no longer referenced; a process that froze objects of its own is
    left as it is."""
    mine = not gc.get_freeze_count()
    if mine:
        gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """One BLAS thread: a replay's arrays are tiny, and OpenBLAS's idle workers spin, which made
    one replay cost 10x its CPU time when replays ran side by side. threadpoolctl limits only
    the libraries loaded so far, so scipy's (the online fits' L-BFGS-B), loaded where it is
    first used, is loaded first: without it a replay burnt a second core (16 CPU s for 9 s)."""
    importlib.import_module("scipy.optimize")
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _replay(jobs: tuple[TraceJob, ...], policy: Policy, config: ReplayConfig,
            on_round: Callable[[float, int], None] | None) -> ReplayResult:
    if not jobs:
        raise ConfigError("the workload has no jobs")
    mode = batch_mode(policy.batch_mode)
    world = _world(config.cluster)
    total = config.total_gpus
    runs = _job_runs(jobs, mode, config, world, config.throughput_model or policy.throughput_model,
                     gpu_type_view(policy))
    states = {j.name: JobState(j) for j in jobs}
    rounds: list[dict] = []
    typed = _gpus_by_type(config.cluster)
    node_type = {n.id: n.gpu_type for n in world.seen.nodes}
    # Only live jobs (submitted, not done) cost anything in a round: a trace of 82k jobs over
    # 109 days has a few hundred at a time. Live jobs keep the trace's order, as rounds see them.
    order = {j.name: i for i, j in enumerate(jobs)}
    pending = collections.deque(sorted(order, key=lambda name: (states[name].job.submit_s, order[name])))
    live: dict[str, JobState] = {}
    done = idle_rounds = 0
    now = config.round_s if config.first_decision_s is None else config.first_decision_s
    with _set_up_frozen():
        while True:
            for name in [k for k, s in live.items() if s.done]:
                states[name] = replace(live.pop(name), gpus=())
            arrived = False
            while pending and states[pending[0]].job.submit_s <= now:
                name = pending.popleft()
                live[name] = states[name]
                arrived = True
            if arrived:
                live = dict(sorted(live.items(), key=lambda item: order[item[0]]))
            log = {"time_s": now, "active_jobs": len(live), "solve_ms": math.nan, "status": "", "objective": math.nan}
            if live:
                ri = RoundInput(world.seen, tuple(_spec(s, runs[s.job.name], now, total) for s in live.values()),
                                round_s=config.round_s)
                t0 = time.perf_counter()
                result = policy.schedule(ri)
                log |= {"solve_ms": 1e3 * (time.perf_counter() - t0), "status": result.status,
                        "objective": result.objective}
                # every round of every replay, whatever the policy checked; budgets are the policy's
                # business (static_freeze ignores them by design): the summary counts violations
                verify(ri, result.allocations, budgets=False)
                for alloc in result.allocations:
                    s, run = live[alloc.job_id], runs[alloc.job_id]
                    if alloc.gpus != s.gpus and set(alloc.gpus) != set(s.gpus):  # most jobs stay, in order
                        bsz = mode.batch_on_move(alloc, run.rules)
                        s = reallocate(s, run.agent, alloc.gpus, bsz, config.restart_delay_s)
                    frozen = alloc.frozen_groups if run.freezing is not None else 0
                    live[alloc.job_id] = s if s.frozen_groups == frozen else replace(s, frozen_groups=frozen)
            running = [s for s in live.values() if s.gpus]
            idle_rounds = idle_rounds + 1 if live and not running and not pending else 0
            if idle_rounds >= STUCK_ROUNDS:
                raise ConfigError(_stuck_message(policy, live, total, idle_rounds))
            log |= {"running_jobs": len(running), "gpus_used": sum(len(s.gpus) for s in running)}
            if typed:
                held = collections.Counter(node_type[g.node] for s in running for g in s.gpus)
                log |= {f"gpus_used_{t}": held[t] for t in typed}
            rounds.append(log)
            if on_round:
                on_round(now, done)
            if now >= config.horizon_s or not live and not pending:
                break
            live = {k: runs[k].kind.advance(s, runs[k], now, config, world) for k, s in live.items()}
            done += sum(s.done for s in live.values())
            now += config.round_s
    states |= live
    jobs_df = _jobs_frame(states, runs, config.cluster.gpus_per_node)
    rounds_df = pd.DataFrame(rounds)
    return ReplayResult(jobs_df, rounds_df, summarize(jobs_df, rounds_df, total, now, typed or None) | _freeze_summary(jobs_df))


def _gpus_by_type(cluster: ClusterSpec) -> dict[str, int]:
    """A mixed cluster's GPUs of each type, whose rounds count each type's GPUs in use (for
    utilization per type); empty on one type, whose rounds and summary stay as they were."""
    pools = cluster.node_pools
    by_type = {t: sum(p.num_nodes * p.gpus_per_node for p in pools if p.gpu_type == t) for t in cluster.gpu_types}
    return by_type if len(by_type) > 1 else {}


@lru_cache(maxsize=4)
def _world(cluster: ClusterSpec) -> World:
    """The world of a cluster, made once per process: PAL's measured variability sorts the GPUs
    into tiers by k-means (clusters.make_cluster), seconds per replay, and a sweep's replays in one
    process share a few clusters."""
    return World(*make_cluster(cluster))


def _spec(state: JobState, run: JobRun, now_s: float, total_gpus: int) -> JobSpec:
    """The job as this round presents it to the policy (its kind's spec)."""
    return run.kind.spec(state, run, now_s, total_gpus)


STUCK_ROUNDS = 3  # rounds an idle cluster may leave every waiting job waiting, with none to arrive


def _stuck_message(policy: Policy, live: dict[str, JobState], total_gpus: int, rounds: int) -> str:
    """Why a replay stops: nothing runs, nothing will arrive, and the policy places nobody."""
    largest = max(live.values(), key=lambda s: s.job.num_replicas).job
    waiting = f"{len(live)} job" + "s" * (len(live) > 1)
    return (f"the cluster ({total_gpus} GPUs) sat idle for {rounds} rounds with {waiting} waiting and none "
            f"left to arrive: {policy.name} gives them no GPUs, so they would wait forever (the largest, "
            f"{largest.name}, asks for {largest.num_replicas} GPUs); use a larger cluster or another policy")


def _freeze_summary(jobs: pd.DataFrame) -> dict:
    """Penalty spent by the jobs that opted in to freezing, and how many overspent their budget."""
    opted = jobs[jobs.freeze_budget.notna()]
    return {"freeze_jobs": int(len(opted)),
            "penalty_mean": float(opted.penalty_spent.mean()) if len(opted) else 0.0,
            "penalty_max": float(opted.penalty_spent.max()) if len(opted) else 0.0,
            "budget_violations": int((opted.penalty_spent > opted.freeze_budget * (1 + 1e-9)).sum())}


def check_out_dir(out_dir: str | Path) -> Path:
    """The replay's output folder, created now if needed: a bad --out (a file, a sweep's folder, a
    folder of other files: io.outputs.claim_folder) fails before the replay, not after."""
    return claim_folder(out_dir, OUTPUT_KINDS["replay"])


def write_outputs(result: ReplayResult, out_dir: str | Path) -> None:
    """jobs.csv, rounds.csv and summary.json in `out_dir` (created if needed)."""
    out = check_out_dir(out_dir)
    spreadsheet_safe(result.jobs).to_csv(out / "jobs.csv", index=False)
    spreadsheet_safe(result.rounds).to_csv(out / "rounds.csv", index=False)
    (out / "summary.json").write_text(json_text(result.summary, indent=2) + "\n")


def _jobs_frame(states: dict[str, JobState], runs: dict[str, JobRun], gpus_per_node: int) -> pd.DataFrame:
    rows = []
    for name, s in states.items():
        job, run = s.job, runs[name]
        isolated = run.kind.isolated_s(job, run.truth, gpus_per_node)
        jct = s.completion_s - job.submit_s if s.completion_s is not None else math.nan
        rows.append({
            "name": name, "application": job.application, "submit_s": job.submit_s,
            "completion_s": s.completion_s if s.done else math.nan, "jct_s": jct,
            "num_replicas": job.num_replicas, "batch_size": job.batch_size, "restarts": s.num_restarts,
            "attained_gpu_s": s.attained_gpu_s, "epochs_done": s.epoch, "isolated_s": isolated,
            "ftf": jct / isolated if isolated > 0 else np.nan,
            "freeze_budget": run.freezing.budget if run.freezing is not None else np.nan, "penalty_spent": s.penalty_spent,
            "app_class": job.app_class, "work_s": job.work_s,
        })
    return pd.DataFrame(rows)
