"""Fuzzed rounds, valid and hostile: `python experiments/fuzz_rounds.py --valid N --mutated M [--json]`.

valid    N random valid rounds (1-64 GPUs of one to three types, 0-40 jobs, goodput or joint,
         every p, racks, PAL's variability, freezing, running jobs on arbitrary GPUs),
         each solved and its answer checked by `capacity_violations`, a checker written apart
         from schedlab.verify: one entry per job, GPUs that exist, none shared, counts within
         [min_gpus, max_gpus].
mutated  M valid rounds as JSON, one field each mutated (dropped, duplicated, retyped, scaled,
         nested, re-encoded), read as bytes by io.load_json and solved: each case must end in a
         verified answer or an InputError within CASE_BOUND_S, never another exception.
Prints the counts, statuses and seconds, JSON last.
"""

from __future__ import annotations

import argparse
import sys

from schedlab.bench.fuzz import run_mutated, run_valid
from schedlab.io import json_text


def main(argv: list[str] | None = None) -> int:
    """Run the valid and the mutated rounds, print the counts; with --json end with one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--valid", type=int, default=1000, help="valid rounds to solve and check")
    parser.add_argument("--mutated", type=int, default=1000, help="mutated rounds to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    out = {"valid": run_valid(args.valid, args.seed), "mutated": run_mutated(args.mutated, args.seed)}
    for name, part in out.items():
        print(name, {k: v for k, v in part.items() if k != "failures"})
        for line in part.get("failures", []):
            print("  ", line)
    if args.json:
        print(json_text(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
