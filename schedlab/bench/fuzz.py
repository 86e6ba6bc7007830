"""Fuzzed rounds, valid and hostile, and an answer checker written apart from schedlab.verify.

valid    random valid rounds (1-64 GPUs of one to three types, 0-40 jobs, goodput or joint,
         every p, racks, PAL's variability, freezing, running jobs on arbitrary GPUs),
         each solved and its answer checked by `capacity_violations`: one entry per job, GPUs
         that exist, none shared, counts within [min_gpus, max_gpus].
mutated  valid rounds as JSON, one field each mutated (dropped, duplicated, retyped, scaled,
         nested, re-encoded), read as bytes by io.load_json and solved: each case must end in a
         verified answer or an InputError within CASE_BOUND_S, never another exception.
experiments/fuzz_rounds.py runs both; experiments/serve_bench.py sends mutated rounds to the
service.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from schedlab.api import solve_round
from schedlab.bench.rounds import mixed_pools, random_round
from schedlab.clusters import ClusterSpec, make_cluster
from schedlab.errors import InputError
from schedlab.io import load_json, round_input_to_dict
from schedlab.state import GpuRef, JobAllocation, RoundInput, Settings

__all__ = ["CASE_BOUND_S", "MUTATIONS", "capacity_violations", "mutated_case", "run_mutated", "run_valid",
           "valid_round"]

PROGRESS_EVERY = 5000  # valid rounds between progress lines on stderr
CASE_BOUND_S = 20.0  # a round with time_limit_s = 1 must answer well within this
P_VALUES = (1.0, 0.0, -0.5, -1.0, float("-inf"))
FUZZED_FORMULATIONS = ("goodput", "joint")  # the rounds that are one model of every job
FUZZED_GPU_TYPES = ("v100", "p100", "k80")
# "measured" variability differs in its draws, not in what a round sees (tiers of slowdown
# factors), and tiering it by k-means takes ~1 s a cluster
FUZZED_VARIABILITY = ("none", "centroids")
FUZZED_TIER_TOLERANCE = (0.05, 0.01)  # the default, and the finer tiers that make a node's patterns many


def valid_round(rng: np.random.Generator, time_limit_s: float = 1.0) -> RoundInput:
    """A random valid round of every part of the round model: the goodput or the joint
    formulation, one to three GPU types, racks, PAL's variability (tiers at two tolerances) and
    jobs that opt in to freezing. On a cluster of one type a third of the rounds have their running jobs on
    arbitrary (not packed) GPUs (a job runs on one type, so not on several)."""
    gpus_per_node = int(rng.choice([1, 2, 4, 8]))
    nodes = int(rng.integers(1, max(64 // gpus_per_node, 1) + 1))
    types = tuple(rng.permutation(FUZZED_GPU_TYPES)[:rng.integers(1, len(FUZZED_GPU_TYPES) + 1)].tolist())
    pools = mixed_pools(nodes * gpus_per_node, types, gpus_per_node) if len(types) > 1 else ()
    nodes = sum(p.num_nodes for p in pools) or nodes
    settings = Settings(formulation=str(rng.choice(FUZZED_FORMULATIONS)), p=float(rng.choice(P_VALUES)),
                        tier_tolerance=float(rng.choice(FUZZED_TIER_TOLERANCE)), time_limit_s=time_limit_s,
                        seed=int(rng.integers(2**31)))
    ri = random_round(rng, nodes * gpus_per_node, int(rng.integers(0, 41)), gpus_per_node,
                      running_fraction=float(rng.uniform(0, 0.8)), settings=settings,
                      freeze_fraction=float(rng.choice([0.0, 0.3])), pools=pools)
    racks, variability = int(rng.integers(0, min(nodes, 4) + 1)), str(rng.choice(FUZZED_VARIABILITY))
    if racks or variability != "none":
        spec = ClusterSpec(nodes, gpus_per_node, racks=racks, uplink_gbps=50.0, variability=variability,
                           seed=int(rng.integers(2**31)), pools=pools)
        ri = replace(ri, cluster=make_cluster(spec)[0])
    return _scatter_running(rng, ri) if not pools and rng.random() < 1 / 3 else ri


def _scatter_running(rng: np.random.Generator, ri: RoundInput) -> RoundInput:
    free = [GpuRef(n.id, i) for n in ri.cluster.nodes for i in range(n.gpus)]
    rng.shuffle(free)
    jobs = []
    for job in ri.jobs:
        if job.current_gpus:
            count = min(len(job.current_gpus), len(free))
            taken, free = tuple(free[:count]), free[count:]
            job = replace(job, current_gpus=taken)
        jobs.append(job)
    return replace(ri, jobs=tuple(jobs))


def capacity_violations(ri: RoundInput, allocations: Sequence[JobAllocation]) -> list[str]:
    """What an answer breaks, checked from the round alone (not with schedlab.verify)."""
    found = []
    size = {n.id: n.gpus for n in ri.cluster.nodes}
    jobs = {j.id: j for j in ri.jobs}
    ids = [a.job_id for a in allocations]
    if sorted(ids) != sorted(jobs):
        found.append(f"jobs answered {sorted(Counter(ids).items())[:5]}... differ from the round's")
    holder: dict[GpuRef, str] = {}
    for a in allocations:
        for g in a.gpus:
            if g.node not in size or not 0 <= g.gpu < size[g.node]:
                found.append(f"{a.job_id}: GPU {g} does not exist")
            if g in holder:
                found.append(f"{a.job_id}: GPU {g} also given to {holder[g]}")
            holder[g] = a.job_id
        job = jobs.get(a.job_id)
        if job is not None and a.gpus and not job.min_gpus <= len(a.gpus) <= job.max_gpus:
            found.append(f"{a.job_id}: {len(a.gpus)} GPUs outside [{job.min_gpus}, {job.max_gpus}]")
    return found


def run_valid(count: int, seed: int = 0) -> dict[str, Any]:
    """Solve `count` valid rounds (seeded) and check each answer with `capacity_violations`.

    Returns the rounds, the answers with a violation, the exceptions (both must be 0), the
    statuses and the seconds; every PROGRESS_EVERY rounds a progress line goes to stderr.
    """
    rng = np.random.default_rng(seed)
    statuses: Counter[str] = Counter()
    violations, exceptions, t0 = 0, 0, time.perf_counter()
    for done in range(count):
        if done and done % PROGRESS_EVERY == 0:  # a long run that is cut short still says something
            print(f"valid {done}: violations {violations}, exceptions {exceptions}, {dict(statuses)}, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        ri = valid_round(rng)
        try:
            result = solve_round(ri)
        except Exception:  # noqa: BLE001 - counted: the acceptance is zero
            exceptions += 1
            continue
        statuses[result.status] += 1
        violations += bool(capacity_violations(ri, result.allocations))
    return {"rounds": count, "violations": violations, "exceptions": exceptions, "statuses": dict(statuses),
            "seconds": time.perf_counter() - t0}


# -- mutations: each takes (rng, the round as JSON, a path into it) and changes it in place ------

def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    out = [path] if path else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            out += _paths(v, (*path, i))
    return out


def _parent(raw: Any, path: tuple) -> tuple[Any, Any]:
    node = raw
    for step in path[:-1]:
        node = node[step]
    return node, path[-1]


def _drop(rng, raw, path):
    parent, key = _parent(raw, path)
    del parent[key]


def _duplicate(rng, raw, path):
    parent, key = _parent(raw, path)
    if isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    else:
        parent[f"{key}_"] = copy.deepcopy(parent[key])


_STRANGE: tuple[Any, ...] = ("", "x" * 100_000, None, True, [], {}, [1, 2], {"a": 1}, -1, 0, 2**64, 10**400, 1e308, -1e-300,
            "NaN", "∞", "\u0000", "ñ" * 10)


def _retype(rng, raw, path):
    parent, key = _parent(raw, path)
    parent[key] = copy.deepcopy(_STRANGE[rng.integers(len(_STRANGE))])


def _scale(rng, raw, path):
    parent, key = _parent(raw, path)
    if isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
        parent[key] = parent[key] * float(rng.choice([-1.0, 0.0, 1e-12, 1e9, 1e300]))
    else:
        _retype(rng, raw, path)


_NEST = "\u2063nest\u2063"  # replaced in the JSON text: json.dumps cannot write 5,000 levels


def _nest(rng, raw, path):
    parent, key = _parent(raw, path)
    parent[key] = [_NEST, int(rng.choice([2, 50, 5_000])), parent[key]]


def _reencode(rng, raw, path):
    parent, key = _parent(raw, path)
    parent[key] = str(parent[key]) + "é\udcff" if rng.random() < 0.5 else "Zürich"


MUTATIONS: dict[str, Callable] = {"drop": _drop, "duplicate": _duplicate, "retype": _retype, "scale": _scale,
                                   "nest": _nest, "re-encode": _reencode}


def mutated_case(rng: np.random.Generator) -> tuple[str, tuple, bytes]:
    """A valid round's JSON with one field mutated: the mutation, the path of the field, and the
    bytes a client would send (Latin-1 now and then, UTF-8 otherwise)."""
    raw = round_input_to_dict(valid_round(rng))
    kind = list(MUTATIONS)[rng.integers(len(MUTATIONS))]
    paths = _paths(raw)
    path = paths[rng.integers(len(paths))]
    MUTATIONS[kind](rng, raw, path)
    text = json.dumps(raw, ensure_ascii=False, allow_nan=True)
    if _NEST in text:
        head, tail = text.split(f'["{_NEST}", ', 1)
        depth, rest = tail.split(", ", 1)
        value, tail = _split_value(rest)
        text = head + "[" * int(depth) + value + "]" * int(depth) + tail
    encoding = "latin-1" if kind == "re-encode" and rng.random() < 0.5 else "utf-8"
    return kind, path, text.encode(encoding, errors="surrogateescape" if encoding == "utf-8" else "replace")


def _split_value(text: str) -> tuple[str, str]:
    """The first JSON value of text and what follows its closing bracket of the nest list."""
    value, end = json.JSONDecoder().raw_decode(text)
    return text[:end], text[end + 1:]


def run_mutated(count: int, seed: int = 0) -> dict[str, Any]:
    """Send `count` mutated rounds (seeded) through io.load_json and solve_round.

    Each case ends in a verified answer or an InputError (counted as outcomes), or in a
    traceback or a hang past CASE_BOUND_S (the acceptance is zero of both); the first 20
    tracebacks are listed.
    """
    rng = np.random.default_rng(seed)
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    slowest, t0 = 0.0, time.perf_counter()
    for case in range(count):
        kind, _, data = mutated_case(rng)
        start = time.perf_counter()
        try:
            result = solve_round(load_json(data, f"case {case}"))
            outcome = "answer" if result.verified else "unverified"
        except InputError:
            outcome = "input_error"
        except Exception as exc:  # noqa: BLE001 - the acceptance is zero of these
            outcome = "traceback"
            failures.append(f"case {case} ({kind}): {type(exc).__name__}: {str(exc)[:200]}")
        elapsed = time.perf_counter() - start
        slowest = max(slowest, elapsed)
        if elapsed > CASE_BOUND_S:
            outcome = "hang"
        outcomes[outcome] += 1
    return {"cases": count, "kinds": len(MUTATIONS), "outcomes": dict(outcomes), "failures": failures[:20],
            "slowest_case_s": slowest, "seconds": time.perf_counter() - t0}
