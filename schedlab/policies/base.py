"""What a policy is: an object the replay (or any embedding scheduler) calls once per round.

A policy receives the round exactly as solve_round() does (a validated RoundInput: the cluster,
every active job with its current GPUs, model and hints) and returns a verified RoundResult.
Two class attributes tell the caller how its jobs behave:
  adaptive_batch    True: jobs re-pick their batch size from their own model (Pollux's agent);
                    False: jobs train at the batch size the user submitted.
  throughput_model  "online": the job's model is fitted to what it has measured so far;
                    "oracle": fitted to the full measured tables (what Optimus+Oracle assumes).
Policies may keep state between rounds (queues, populations); make a fresh one per replay.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from schedlab.state import RoundInput, RoundResult


class Policy(Protocol):
    name: ClassVar[str]
    adaptive_batch: ClassVar[bool]
    throughput_model: ClassVar[str]

    def schedule(self, round_input: RoundInput) -> RoundResult: ...
