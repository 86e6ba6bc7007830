"""PAL's simulated world (Jain et al. SC'24; the artifact's simulator, github.com/hal-uw/blox-pal).

A job (Sia-Philly trace: job_id, num_gpus, submit_time, duration, model) needs exactly
num_gpus GPUs. Every `round_s` (PAL: 360 s) the jobs that arrived by then are ordered (fifo:
submit time; las: least attained GPU-seconds; srtf: least remaining work) and the queue is
cut at the cluster's capacity: jobs in order while they fit, stopping at the first that does
not (PAL's cut; `backfill=True` skips it and goes on). The placement policy
(policies.placement) gives the chosen jobs concrete GPUs; the others wait (preempted). A running
job progresses at 1 / (max slowdown of its GPUs for its class x L if it spans nodes) seconds
of work per second, after `restart_delay_s` whenever its GPU set changed (PAL: 0, a job that
lands on the same GPUs is not restarted).

The artifact's semantics, each a setting so that its effect can be measured on its own:
  work="iterations"    `duration` counts iterations; an iteration takes the artifact's measured
                       time for the model (ITERATION_S); "seconds": `duration` is seconds of work.
  slowdowns="measured" each simulated GPU runs at a measured GPU's slowest run over the median
                       (drawn with replacement, seeded) and policies see PAL's tiers of those
                       (models.variability.tiered); "centroids": truth is the tiers themselves.
  finish_at_round_end  a job that finishes inside a round is counted done at the round's end
                       (the artifact records completion at its next round).
Model -> class as the artifact's trace loader: resnet50 -> A (ResNet-like), BERT, GPT2, DCGAN
-> B (BERT-like), vgg19 -> C (BERT-like data), PointNet -> D (PageRank-like), others -> A.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
from scipy.stats import gmean

from schedlab.errors import ConfigError
from schedlab.formulations.placement import PlacementGpu, PlacementInput, PlacementJob, job_speed
from schedlab.models.variability import assign_slowdowns, sample_measured, tiered
from schedlab.policies.placement import EXACT, PLACEMENT_POLICIES
from schedlab.replay.engine import ReplayResult
from schedlab.topology import build_cluster, node_of
from schedlab.topology import gpus as gpus_of

ORDERS = ("fifo", "las", "srtf")
WORKS = ("iterations", "seconds")
SLOWDOWNS = ("measured", "centroids")
MODEL_CLASS = {"resnet50": "classA", "bert": "classB", "gpt2": "classB", "dcgan": "classB", "vgg19": "classC",
               "pointnet": "classD"}
ITERATION_S = {"resnet50": 0.17540429367763434, "bert": 0.179, "gpt2": 3.5714, "dcgan": 0.0469266931,
               "pointnet": 0.28125, "vgg19": 0.300610341}  # the artifact's per-model iteration times


@dataclass(frozen=True)
class PalConfig:
    num_nodes: int = 16
    gpus_per_node: int = 4
    round_s: float = 360.0
    across_node: float = 1.7
    order: str = "fifo"
    backfill: bool = False
    work: str = "iterations"
    slowdowns: str = "measured"
    finish_at_round_end: bool = True
    restart_delay_s: float = 0.0
    restart_penalty: float = 0.0  # what the exact placement charges a move (fraction of a round)
    placement_time_limit_s: float = 1.0  # per round, for the exact placements (warm-started from PAL)
    seed: int = 0  # slowdown assignment and random placement
    horizon_s: float = 120 * 86400.0

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ConfigError(f"order {self.order!r}: use one of {', '.join(ORDERS)}")
        if self.work not in WORKS:
            raise ConfigError(f"work {self.work!r}: use one of {', '.join(WORKS)}")
        if self.slowdowns not in SLOWDOWNS:
            raise ConfigError(f"slowdowns {self.slowdowns!r}: use one of {', '.join(SLOWDOWNS)}")
        if self.round_s <= 0 or self.across_node < 1 or self.num_nodes < 1 or self.gpus_per_node < 1:
            raise ConfigError("round_s > 0, across_node >= 1, num_nodes and gpus_per_node >= 1")


def model_class(model: str) -> str:
    return MODEL_CLASS.get(model.lower(), "classA")


def work_s(model: str, duration: float, work: str) -> float:
    """Seconds of work at full speed: `duration` itself, or that many of the model's iterations."""
    if work == "seconds":
        return duration
    if model.lower() not in ITERATION_S:
        raise ConfigError(f"model {model!r} has no iteration time in PAL's simulator; use one of "
                          f"{', '.join(ITERATION_S)} or work='seconds'")
    return duration * ITERATION_S[model.lower()]


def cluster_gpus(num_nodes: int, gpus_per_node: int, slowdowns: str, rng: np.random.Generator,
                 kmeans_seed: int = 0) -> tuple[tuple[PlacementGpu, ...], tuple[PlacementGpu, ...]]:
    """PAL's cluster: its GPUs as the policies see them and as they run (see `slowdowns` above)."""
    graph = build_cluster(num_nodes, gpus_per_node)
    ids = gpus_of(graph)
    if slowdowns == "measured":
        truth = sample_measured(ids, rng)
        seen = tiered(truth, kmeans_seed)
    else:
        truth = seen = assign_slowdowns(ids, rng)
    return (tuple(PlacementGpu(g, node_of(graph, g), seen[g]) for g in ids),
            tuple(PlacementGpu(g, node_of(graph, g), truth[g]) for g in ids))


def pal_replay(trace: pd.DataFrame, placement: str, config: PalConfig = PalConfig()) -> ReplayResult:
    if placement not in PLACEMENT_POLICIES:
        raise ConfigError(f"unknown placement {placement!r}; use one of {', '.join(PLACEMENT_POLICIES)}")
    place = PLACEMENT_POLICIES[placement]
    if placement in EXACT:
        place = partial(place, time_limit_s=config.placement_time_limit_s)
    rng = np.random.default_rng(config.seed)
    gpus, true_gpus = cluster_gpus(config.num_nodes, config.gpus_per_node, config.slowdowns,
                                   np.random.default_rng(config.seed), config.seed)
    ids = [g.id for g in gpus]
    truth_world = PlacementInput(true_gpus, (), config.across_node)  # speeds as the GPUs really run
    too_big = trace[trace.num_gpus > len(ids)]
    if len(too_big):
        raise ConfigError(f"job {too_big.job_id.iloc[0]} needs {too_big.num_gpus.iloc[0]} GPUs, the cluster has "
                          f"{len(ids)}; use a larger cluster")
    jobs = trace.sort_values(["submit_time", "job_id"], kind="stable").reset_index(drop=True)
    n = len(jobs)
    submit = jobs.submit_time.to_numpy(float)
    need = jobs.num_gpus.to_numpy(int)
    remaining = np.array([work_s(m, d, config.work) for m, d in zip(jobs.model, jobs.duration)])
    classes = [model_class(m) for m in jobs.model]
    attained = np.zeros(n)
    current: list[tuple[str, ...]] = [() for _ in range(n)]
    finish = np.full(n, np.nan)
    rounds = []
    now = 0.0
    while np.isnan(finish).any() and now < config.horizon_s:
        active = np.flatnonzero((submit <= now) & np.isnan(finish))
        if not len(active):
            now = max(now + config.round_s, math.ceil(submit[np.isnan(finish)].min() / config.round_s) * config.round_s)
            continue
        key = {"fifo": submit, "las": attained, "srtf": remaining}[config.order]
        chosen, used = [], 0
        for j in sorted(active, key=lambda j: (key[j], submit[j], j)):
            if used + need[j] <= len(ids):
                chosen.append(j)
                used += need[j]
            elif not config.backfill:
                break
        pi = PlacementInput(gpus, tuple(PlacementJob(str(j), int(need[j]), classes[j], current[j]) for j in chosen),
                            config.across_node, config.restart_penalty)
        t0 = time.perf_counter()
        placed = place(pi, rng)
        solve_ms = 1e3 * (time.perf_counter() - t0)
        for j in active:
            if j not in chosen:
                current[j] = ()
        for job in pi.jobs:
            j = int(job.id)
            gpu_ids = placed[job.id]
            delay = config.restart_delay_s if set(gpu_ids) != set(current[j]) else 0.0
            current[j] = gpu_ids
            speed = job_speed(truth_world, job, gpu_ids)
            run_s = max(config.round_s - delay, 0.0)
            if remaining[j] <= run_s * speed:
                busy_s = config.round_s if config.finish_at_round_end else delay + remaining[j] / speed
                finish[j] = now + busy_s
                remaining[j] = 0.0
                current[j] = ()
            else:
                busy_s = config.round_s
                remaining[j] -= run_s * speed
            attained[j] += need[j] * busy_s
        rounds.append({"time_s": now, "active_jobs": len(active), "running_jobs": len(chosen), "gpus_used": used,
                       "solve_ms": solve_ms})
        now += config.round_s
    done = ~np.isnan(finish)
    jct = finish - submit
    out = jobs.assign(**{"class": classes, "completion_s": finish, "jct_s": jct, "attained_gpu_s": attained})
    rounds_df = pd.DataFrame(rounds)
    makespan = float(np.nanmax(finish) - submit.min()) if done.any() else math.nan
    summary = {
        "jobs_total": n, "jobs_completed": int(done.sum()),
        "mean_jct_s": float(np.mean(jct[done])) if done.any() else math.nan,
        "geomean_jct_s": float(gmean(jct[done])) if done.any() else math.nan,
        "p99_jct_s": float(np.percentile(jct[done], 99)) if done.any() else math.nan,
        "makespan_s": makespan,
        "utilization": float(attained.sum() / (len(ids) * makespan)) if done.any() else math.nan,
        "rounds": len(rounds_df),
        "solve_p50_ms": float(rounds_df.solve_ms.median()) if len(rounds_df) else math.nan,
    }
    return ReplayResult(out, rounds_df, summary)
