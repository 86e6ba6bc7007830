"""The service's soak: a server on 127.0.0.1, started and stopped by this script (Linux).

    python experiments/serve_soak.py [--seconds 60] [--clients 8] [--workers 2] [--kill-every 3] [--json]

For --seconds, client threads post valid rounds (examples/round-16x4.json, small random rounds)
and malformed bodies while every --kill-every seconds one round worker is killed with SIGKILL and
one client hangs up halfway through its body (schedlab.bench.soak). Prints the figures: requests,
answers, wrong answers by kind, rounds whose worker died twice, worker kills, memory after
warm-up and at the end; then the promises broken, if any (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import sys

from schedlab.bench.soak import run_soak, soak_failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the clients send")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="the service's round workers")
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between two worker kills")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    args = parser.parse_args(argv)
    figures = run_soak(args.seconds, args.clients, args.workers, args.kill_every)
    print(json.dumps(figures) if args.json else "\n".join(f"{k:16} {v}" for k, v in figures.items()))
    failures = soak_failures(figures)
    for failure in failures:
        print(f"broken: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
