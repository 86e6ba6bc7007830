"""What a policy is: an object the replay (or any embedding scheduler) calls once per round.

A policy receives the round exactly as solve_round() does (a validated RoundInput: the cluster,
every active job with its current GPUs, model and hints) and returns a verified RoundResult.
Two class attributes tell the caller how its jobs behave:
  batch_mode        "adaptive": jobs re-pick their batch size from their own model (Pollux's
                    agent); "fixed": jobs train at the batch size the user submitted;
                    "allocated": jobs train at the total batch the policy allocates (ONES).
  throughput_model  "online": the job's model is fitted to what it has measured so far;
                    "oracle": fitted to the full measured tables (what Optimus+Oracle assumes).
Policies may keep state between rounds (queues, populations); make a fresh one per replay.
"""

from __future__ import annotations

from typing import Protocol

from schedlab.state import RoundInput, RoundResult, Status

__all__ = ["HEURISTIC", "Policy"]

HEURISTIC = Status.HEURISTIC


class Policy(Protocol):
    """A scheduling policy (module docstring); policies.make_policy builds one by name."""

    @property
    def name(self) -> str:
        """The policy's name in the registry (policies.POLICIES)."""

    @property
    def batch_mode(self) -> str:
        """How its jobs choose their batch: "adaptive", "fixed" or "allocated"."""

    @property
    def throughput_model(self) -> str:
        """Which model its jobs are valued with: "online" (fitted as they run) or "oracle"."""

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """The round's verified allocation; may update the policy's state for the next round."""
