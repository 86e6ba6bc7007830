"""A scheduler loop that asks a schedlab service for every round: the replay engine keeps the
cluster and the jobs, and a policy object sends each round over HTTP instead of solving it.

    schedlab serve --port 8080 &
    python examples/service_replay.py --workload workload-6 --policy pollux --url http://127.0.0.1:8080

It prints the mean JCT of the replay through the service and of `schedlab replay`'s own, which
match: the service solves the very rounds solve_round() would.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from schedlab.io import round_input_to_dict, round_result_from_dict
from schedlab.policies import make_policy
from schedlab.policies.goodput import GoodputPolicy
from schedlab.replay.engine import WORLDS, replay
from schedlab.state import RoundInput, RoundResult
from schedlab.traces import load_workload, trace_jobs


@dataclass
class ServicePolicy:
    """A goodput policy (pollux, sia, ...) whose rounds the service at `url` solves: the same
    round as the local policy would solve (its settings, its view of each job), sent as JSON."""

    local: GoodputPolicy
    url: str

    def __post_init__(self) -> None:
        self.name, self.batch_mode, self.throughput_model = (self.local.name, self.local.batch_mode,
                                                             self.local.throughput_model)
        parts = urlsplit(self.url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=300)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        jobs = tuple(self.local.sized(self.local.prepare(job)) for job in round_input.jobs)
        body = json.dumps(round_input_to_dict(replace(round_input, jobs=jobs, settings=self.local.settings)))
        self.conn.request("POST", "/v1/solve", body, {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        answer: dict[str, Any] = json.loads(resp.read())
        if resp.status != 200:
            raise RuntimeError(f"service answered {resp.status}: {answer}")
        return round_result_from_dict(answer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="workload-6")
    parser.add_argument("--policy", default="pollux")
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    args = parser.parse_args(argv)
    jobs = trace_jobs(load_workload(args.workload))
    config = WORLDS["pollux"]  # `schedlab replay`'s default world, with its horizon rule
    config = replace(config, horizon_s=max(config.horizon_s, max(j.submit_s for j in jobs) + config.horizon_s))
    remote = replay(jobs, ServicePolicy(make_policy(args.policy), args.url), config)
    local = replay(jobs, make_policy(args.policy), config)
    print(json.dumps({"service_mean_jct_s": remote.summary["mean_jct_s"],
                      "local_mean_jct_s": local.summary["mean_jct_s"], "rounds": remote.summary["rounds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
