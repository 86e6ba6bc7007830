"""Goodput policies: the round MILP of formulations.goodput through solve_round().

pollux  p = -1 (Pollux's power mean), Pollux's restart factor with S = 30 s, and a large
        unallocated penalty: Pollux floors speedups at 1e-3 inside its p = -1 mean, so an
        unallocated job costs ~250x a job at its fair share; lambda = 100 puts leaving a job
        out in the same place relative to its smallest option (speedup ~0.3-0.5 at 64 GPUs).
sia     p = -0.5 and lambda = 1.1 (Sia, SOSP'23), same restart factor.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from schedlab.api import solve_round
from schedlab.state import RoundInput, RoundResult, Settings


@dataclass
class GoodputPolicy:
    settings: Settings
    name: ClassVar[str] = "goodput"
    batch_mode: ClassVar[str] = "adaptive"
    throughput_model: ClassVar[str] = "online"

    def schedule(self, round_input: RoundInput) -> RoundResult:
        return solve_round(replace(round_input, settings=self.settings))


@dataclass
class PolluxPolicy(GoodputPolicy):
    settings: Settings = field(default_factory=lambda: Settings(p=-1.0, restart_cost_s=30.0, unallocated_penalty=100.0))
    name: ClassVar[str] = "pollux"


@dataclass
class SiaPolicy(GoodputPolicy):
    settings: Settings = field(default_factory=lambda: Settings(p=-0.5, restart_cost_s=30.0, unallocated_penalty=1.1))
    name: ClassVar[str] = "sia"
