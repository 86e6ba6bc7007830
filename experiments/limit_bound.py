"""How far past its time limit a round can run: the largest rounds the schema allows, each sent
as the bytes a client would send and solved in a process of its own.

    python experiments/limit_bound.py [--limit-s 5] [--json]

Each case is a worst case of one family: the most jobs on the fewest GPUs (option building),
the most GPUs and jobs (partitioned), every job freezing (its options per level), the joint
model, a placement on the most GPUs (windows), and a round above the size limit (its error).
The time is solve_round's, from the bytes to the verified answer (the process's start and
imports, ~1 s, are not in it); memory is the process's peak.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from typing import Any

import numpy as np

CASES = {  # name: (GPUs, jobs, GPUs per node, formulation, share of jobs freezing)
    "most jobs, 4 GPUs": (4, 32_768, 4, "goodput", 0.0),
    "most jobs, 4 GPUs, all freezing": (4, 32_768, 4, "goodput", 1.0),
    "most GPUs and jobs": (65_536, 32_768, 8, "goodput", 0.0),
    "most GPUs and jobs, all freezing": (65_536, 32_768, 8, "goodput", 1.0),
    "joint, half freezing": (16_384, 32_768, 4, "joint", 0.5),
    "placement, most GPUs": (65_536, 32_768, 8, "placement", 0.0),
    "over the size limit, ~50 MB": (65_536, 40_000, 8, "goodput", 1.0),
}


def _payload(num_gpus: int, num_jobs: int, per_node: int, formulation: str, freeze: float, limit_s: float) -> bytes:
    from schedlab.bench import random_round
    from schedlab.io import round_input_to_dict
    from schedlab.state import Settings

    ri = random_round(np.random.default_rng(0), num_gpus, num_jobs, per_node,
                      settings=Settings(formulation=formulation, time_limit_s=limit_s), freeze_fraction=freeze)
    return json.dumps(round_input_to_dict(ri)).encode()


def _run_case(args: tuple, out: Any) -> None:
    from schedlab import InputError, solve_round
    from schedlab.io import load_json

    raw = _payload(*args)
    t0 = time.perf_counter()
    try:
        result = solve_round(load_json(raw, "round"))
        answer = {"status": result.status, "verified": result.verified}
    except InputError as err:
        answer = {"status": "input_error", "error": err.problems[0][:120]}
    out.put({"mb": round(len(raw) / 1e6, 1), "wall_s": round(time.perf_counter() - t0, 2), **answer,
             "peak_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)})


def run(limit_s: float) -> dict[str, dict]:
    rows = {}
    ctx = multiprocessing.get_context("spawn")  # a fresh process per case: its own peak memory
    for name, case in CASES.items():
        queue = ctx.Queue()
        proc = ctx.Process(target=_run_case, args=((*case, limit_s), queue))
        proc.start()
        rows[name] = {**queue.get(), "ratio": None}
        proc.join()
        if rows[name]["status"] != "input_error":
            rows[name]["ratio"] = round(rows[name]["wall_s"] / limit_s, 2)
        print(f"{name:34s} {rows[name]}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-s", type=float, default=5.0, help="every round's time_limit_s")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    rows = run(args.limit_s)
    worst = max((r["ratio"] for r in rows.values() if r["ratio"] is not None), default=None)
    print(f"worst: {worst}x the limit")
    if args.json:
        from schedlab.io import json_text

        print(json_text({"limit_s": args.limit_s, "worst_ratio": worst, "cases": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
