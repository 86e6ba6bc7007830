"""The solve-latency benchmarks behind `schedlab bench`: random rounds solved and timed.

`run_bench` times rounds of one size or of given node pools of several GPU types (optionally on
racks or with GPU variability); `run_scale` times each of SCALE_GPUS in a process of its own,
under any formulation, on racks of a fixed size, with GPU variability or split over GPU types,
and bounds each answer's loss against the unpartitioned round's LP bound.
"""

from __future__ import annotations

import collections
import math
import multiprocessing
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import cast

import numpy as np

from schedlab.api import solve_round
from schedlab.bench.rounds import mixed_pools, random_round
from schedlab.clusters import ClusterSpec, NodePool, make_cluster, pools_text
from schedlab.formulations import FORMULATIONS
from schedlab.milp import MilpModel, OneRoundModel, RoundModel
from schedlab.partition import PARTITIONED, auto_partitions
from schedlab.solvers.highs_direct import lp_bound
from schedlab.state import Cluster, RoundInput, RoundResult, Settings
from schedlab.verify import verify

__all__ = ["SCALE_GPUS", "run_bench", "run_scale", "scale_rounds"]


def run_bench(num_gpus: int, num_jobs: int, rounds: int, solver: str = Settings.solver, seed: int = 0,
              p: float = -1.0, time_limit_s: float = 10.0, freeze_fraction: float = 0.0,
              formulation: str = "goodput", racks: int = 0, variability: str = "none",
              pools: tuple[NodePool, ...] = (), mip_gap: float = Settings.mip_gap, warmup: int = 1) -> dict:
    """Solve `rounds` random rounds; latency percentiles (ms), worst gap and status counts.

    `warmup` untimed rounds come first, each drawn from a generator of its own (the timed rounds
    are those of `seed` whatever it is): what a process's first round loads and caches (imports,
    first-use set-up, the batch grids' memo) is start-up, not a round's latency, and a scheduler
    embedding the round lives across rounds. 3 rounds of 2,048 GPUs, joint: the cold first round
    took 300-330 ms where the same round warm took 265, and it was the median.

    With `pools` the rounds run on those node pools of GPU types (bench.rounds.random_round;
    num_gpus is their GPUs), the JSON's `cluster` names them. With `racks` or `variability`
    (clusters.VARIABILITY), the rounds run on that cluster (4 GPUs per node unless `pools`,
    uplinks at half the node bandwidth), as a scheduler sees it. `floor_p50_ms`
    is what the floor of an unproven answer costs on top of the round's options: the
    formulation's greedy, decoded and verified (`_floor_s`, timed apart from the round).
    `lp_alone_p50_ms` is the floor of any exact solve of the round: its model's LP relaxation
    solved alone by HiGHS (`_lp_alone`, null for a round that is not one model), and
    `total_over_lp` how many times that the whole round takes (total_p50_ms / lp_alone_p50_ms).
    `gap_max` is each answer's own gap (a partitioned answer's: against its parts' bounds), and
    `gap_vs_lp_max` its loss against that LP relaxation's bound (`_loss_vs`), the one figure
    that compares a partitioned answer with the whole round."""
    rng = np.random.default_rng(seed)
    build, solve, total, gaps, floor, lp_alone, losses = [], [], [], [], [], [], []
    statuses: collections.Counter[str] = collections.Counter()
    cluster = None
    if pools:
        num_gpus = sum(p.num_nodes * p.gpus_per_node for p in pools)
    if racks or variability != "none":
        spec = ClusterSpec(max(num_gpus // 4, 1), 4, racks=racks, uplink_gbps=50.0, variability=variability, seed=seed,
                           pools=pools)
        cluster = make_cluster(spec)[0]
    settings = Settings(formulation=formulation, p=p, solver=solver, time_limit_s=time_limit_s, mip_gap=mip_gap)

    def draw(gen: np.random.Generator) -> RoundInput:
        ri = random_round(gen, num_gpus, num_jobs, settings=settings, freeze_fraction=freeze_fraction, pools=pools)
        return replace(ri, cluster=cluster) if cluster is not None else ri

    for k in range(warmup):
        solve_round(draw(np.random.default_rng([seed, k + 1])))
    for _ in range(rounds):
        ri = draw(rng)
        t0 = time.perf_counter()
        res = solve_round(ri)
        total.append(time.perf_counter() - t0)
        build.append(res.build_s)
        solve.append(res.solve_s)
        gaps.append(res.gap)
        statuses[res.status] += 1
        model = FORMULATIONS[ri.settings.formulation](ri)
        floor.append(_floor_s(ri, model))
        seconds, bound = _lp_alone(model)
        lp_alone.append(seconds)
        losses.append(_loss_vs(ri, res, bound))
    total_ms, lp_ms = _ms(total, 50), _ms(lp_alone, 50)
    return {
        "gpus": num_gpus, "jobs": num_jobs, "rounds": rounds, "solver": solver, "formulation": formulation,
        **({"cluster": pools_text(pools)} if pools else {}),
        "racks": racks, "variability": variability, "p": p, "freeze": freeze_fraction, "mip_gap": mip_gap,
        "warmup_rounds": warmup,
        "build_p50_ms": _ms(build, 50), "solve_p50_ms": _ms(solve, 50),
        "total_p50_ms": total_ms, "total_p95_ms": _ms(total, 95), "total_max_ms": _ms(total, 100),
        "floor_p50_ms": _ms(floor, 50), "lp_alone_p50_ms": lp_ms, "total_over_lp": total_ms / lp_ms,
        "gap_max": float(max(gaps)), "gap_vs_lp_max": float(np.max(losses)), "status_counts": dict(statuses),
    }


def _floor_s(ri: RoundInput, model: RoundModel) -> float:
    """Seconds the greedy floor of an answer costs once the round's model is built: the
    formulation's fallback, decoded and verified (solve_round pays it only for an unproven answer)."""
    t0 = time.perf_counter()
    verify(ri, model.decode(model.fallback()))
    return time.perf_counter() - t0


def _lp_alone(model: RoundModel) -> tuple[float, float]:
    """Seconds HiGHS takes on the model's LP relaxation alone (integrality dropped, presolve off:
    solvers.highs_direct.lp_bound), the model handed over and solved, its arrays built untimed,
    and the relaxation's bound; NaN for both for a round solved as a sequence of models (no arrays)."""
    if not hasattr(model, "arrays"):
        return math.nan, math.nan
    arrays = cast(MilpModel, model).arrays()
    t0 = time.perf_counter()
    bound = lp_bound(arrays)
    return time.perf_counter() - t0, bound


def _ms(seconds: list[float], q: float) -> float:
    """The q-th percentile in milliseconds."""
    return float(np.percentile(seconds, q) * 1e3)


SCALE_GPUS = (64, 256, 1024, 2048, 4096, 16384, 65536)


def scale_rounds(num_gpus: int) -> int:
    """Rounds timed per size: 20 up to 1,024 GPUs, then fewer as each costs more."""
    return max(2, min(20, 20 * 1024 // num_gpus))


def run_scale(sizes: tuple[int, ...] = SCALE_GPUS, seed: int = 0, time_limit_s: float = 30.0,
              formulation: str = "goodput", rack_nodes: int = 0, variability: str = "none",
              gpu_types: tuple[str, ...] = (), mip_gap: float = Settings.mip_gap) -> list[dict]:
    """One row per cluster size (jobs = GPUs / 2), each measured in a fresh process so that its
    memory peak is its own: `_scale_row`.

    With `gpu_types`, each size's nodes are split over those types (bench.rounds.mixed_pools),
    every job with parameters on each (bench.rounds.random_round).

    With `rack_nodes` or `variability` (clusters.VARIABILITY), each size runs on that cluster:
    4 GPUs per node, racks of `rack_nodes` nodes (0: no topology) with uplinks at half the node
    bandwidth, as run_bench's. Racks of 16 nodes (64 GPUs) make 32 racks at 2,048 GPUs and
    1,024 at 65,536.
    """
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for gpus in sizes:
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            rows.append(pool.submit(_scale_row, gpus, gpus // 2, scale_rounds(gpus), seed, time_limit_s, formulation,
                                    rack_nodes, variability, gpu_types, mip_gap).result())
    return rows


def _scale_cluster(num_gpus: int, rack_nodes: int, variability: str, seed: int,
                   pools: tuple[NodePool, ...]) -> Cluster | None:
    """The cluster of one size of the scale table (None: random_round's own, no topology)."""
    if not rack_nodes and variability == "none":
        return None
    num_nodes = max(num_gpus // 4, 1)
    racks = math.ceil(num_nodes / rack_nodes) if rack_nodes else 0
    return make_cluster(ClusterSpec(num_nodes, 4, racks=racks, uplink_gbps=50.0, variability=variability, seed=seed,
                                    pools=pools))[0]


def _scale_row(num_gpus: int, num_jobs: int, rounds: int, seed: int, time_limit_s: float, formulation: str,
               rack_nodes: int, variability: str, gpu_types: tuple[str, ...] = (), mip_gap: float = Settings.mip_gap) -> dict:
    """Latency of `rounds` random rounds (auto partitions), and after the timing, untimed, each
    answer's loss against the unpartitioned round's LP bound (`_loss_vs_lp_bound`)."""
    rng = np.random.default_rng(seed)
    settings = Settings(formulation=formulation, time_limit_s=time_limit_s, mip_gap=mip_gap)
    pools = mixed_pools(num_gpus, gpu_types) if gpu_types else ()
    cluster = _scale_cluster(num_gpus, rack_nodes, variability, seed, pools)
    options, build, solve, total, losses, parts = [], [], [], [], [], []
    statuses: collections.Counter[str] = collections.Counter()
    for _ in range(rounds):
        ri = random_round(rng, num_gpus, num_jobs, settings=settings, pools=pools)
        if cluster is not None:
            ri = replace(ri, cluster=cluster)
        t0 = time.perf_counter()
        res = solve_round(ri)
        total.append(time.perf_counter() - t0)
        options.append(res.options_s)
        build.append(res.build_s - res.options_s)
        solve.append(res.solve_s)
        statuses[res.status] += 1
        parts.append(auto_partitions(ri))
        losses.append(_loss_vs_lp_bound(ri, res))
    peak_mb = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024
    racks = len(cluster.topology.racks) if cluster is not None and cluster.topology is not None else 0
    return {"gpus": num_gpus, "jobs": num_jobs, "rounds": rounds, "formulation": formulation, "mip_gap": mip_gap, "racks": racks,
            **({"cluster": pools_text(pools)} if pools else {}), "variability": variability, "partitions": max(parts),
            "options_p50_ms": _ms(options, 50), "build_p50_ms": _ms(build, 50), "solve_p50_ms": _ms(solve, 50),
            "total_p50_ms": _ms(total, 50), "total_p95_ms": _ms(total, 95),
            "gap_vs_lp_max": float(np.max(losses)), "peak_mb": peak_mb, "status_counts": dict(statuses)}


# The unpartitioned round's relaxation, solved for the loss alone (no vertex), may take this long:
# 855 s at 65,536 GPUs / 32,000 jobs (joint, PAL's variability, 1,024 racks).
LOSS_LP_LIMIT_S = 3600.0


def _loss_vs_lp_bound(ri: RoundInput, res: RoundResult) -> float:
    """`_loss_vs` the unpartitioned round's LP bound, its relaxation solved here without a
    vertex (NaN where the round is not one MILP; inf where it did not solve in LOSS_LP_LIMIT_S)."""
    model = FORMULATIONS[ri.settings.formulation](ri)
    if not hasattr(model, "arrays"):
        return math.nan
    return _loss_vs(ri, res, lp_bound(cast(OneRoundModel, model).arrays(), LOSS_LP_LIMIT_S, vertex=False))


def _loss_vs(ri: RoundInput, res: RoundResult, bound: float) -> float:
    """(bound - objective) / |objective|, both of the unpartitioned round's model, `bound` its LP
    relaxation's (an upper bound on the answer's loss against that model's optimum): the
    objective the answer's own where the whole model found it, else (a partitioned answer) the
    formulation's `value` of it. NaN where the bound is, or a partitioned answer has no `value`
    to be valued by."""
    entry = FORMULATIONS[ri.settings.formulation]
    if res.status != PARTITIONED:
        objective = res.objective
    elif entry.value is not None:
        objective = entry.value(ri, res.allocations)
    else:
        return math.nan
    return (bound - objective) / max(abs(objective), 1e-9)
