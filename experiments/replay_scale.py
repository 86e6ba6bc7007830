"""Replay cost at scale: one replay of a workload sampled from the Philly trace as Pollux's
generator does (`--jobs` jobs over 8 hours), or of a shipped workload, on `--nodes` 4-GPU nodes;
prints the summary, the CPU seconds and the rounds, JSON last."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from schedlab.io import json_text
from schedlab.policies import make_policy
from schedlab.sim.engine import one_blas_thread, replay
from schedlab.sim.world import WORLDS
from schedlab.traces import load_workload, philly_workload, trace_jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--jobs", type=int, help="sample this many jobs from the Philly trace (seed 0)")
    source.add_argument("--workload", help="a shipped workload, e.g. workload-6")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--policy", default="pollux")
    parser.add_argument("--mip-gap", type=float, default=None,
                        help="the goodput policies' relative MIP gap (default: theirs, 1e-4)")
    args = parser.parse_args(argv)
    with one_blas_thread():  # sampling interpolates tiny tables: spinning BLAS threads made it 4x slower
        workload = philly_workload(args.jobs, np.random.default_rng(0)) if args.jobs else load_workload(args.workload)
    config = WORLDS["pollux"].with_options(num_nodes=args.nodes)
    t0 = time.process_time()
    params = {"settings": {"mip_gap": args.mip_gap}} if args.mip_gap is not None else None
    result = replay(trace_jobs(workload), make_policy(args.policy, params), config)
    out = {"policy": args.policy, "jobs": len(workload), "gpus": config.total_gpus,
           "cpu_s": time.process_time() - t0} | result.summary
    print(json_text(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
