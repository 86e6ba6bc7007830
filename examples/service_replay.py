"""A scheduler loop that asks a schedlab service for every round: the replay engine keeps the
cluster and the jobs, and a policy object sends each round over HTTP instead of scheduling it.

    schedlab serve --port 8080 &
    python examples/service_replay.py --workload workload-6 --policy pollux --url http://127.0.0.1:8080

Each round goes to POST /v1/policies/POLICY/rounds under one state_id, so the service runs the
named policy (its settings, its view of the jobs, and for tiresias or ones its queues or
population, kept between rounds). It prints the mean JCT of the replay through the service and
of `schedlab replay`'s own, which match.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import uuid
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlsplit

from schedlab.io import round_input_to_dict, round_result_from_dict
from schedlab.policies import make_policy
from schedlab.replay_api import setup
from schedlab.state import RoundInput, RoundResult


@dataclass
class ServicePolicy:
    """A policy of the registry run by the service at `url` under `state_id`; the local
    instance only tells the replay how its jobs behave (batch_mode, throughput_model)."""

    name: str
    url: str
    state_id: str

    def __post_init__(self) -> None:
        local = make_policy(self.name)
        self.batch_mode, self.throughput_model = local.batch_mode, local.throughput_model
        parts = urlsplit(self.url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=300)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        path = f"/v1/policies/{quote(self.name)}/rounds?state_id={quote(self.state_id)}"
        self.conn.request("POST", path, json.dumps(round_input_to_dict(round_input)), {"Content-Type": "application/json"})
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
    here = setup(args.workload, args.policy)  # `schedlab replay`'s jobs, world and horizon rule
    remote = replace(here, policy=ServicePolicy(args.policy, args.url, f"replay-{uuid.uuid4().hex}")).run()
    local = here.run()
    print(json.dumps({"service_mean_jct_s": remote.summary["mean_jct_s"],
                      "local_mean_jct_s": local.summary["mean_jct_s"], "rounds": remote.summary["rounds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
