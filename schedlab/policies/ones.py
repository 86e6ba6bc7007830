"""`ones`: the ONES-style evolutionary search (policies.evolutionary) as a policy.

Jobs train at the batch the search allocates (linear scaling from the initial batch, capped,
split within their batch limits on the type of their GPUs), with at most 4x their requested GPUs
(set by the replay, as ONES caps growth at 4x); a pinned job stays on its GPUs, and an
allocation on a type the job's parameters were projected for says so.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from schedlab.policies.base import HEURISTIC
from schedlab.policies.evolutionary import Evolution, EvolutionConfig
from schedlab.state import JobAllocation, RoundInput, RoundResult, Settings
from schedlab.verify import verify

__all__ = ["OnesPolicy"]


@dataclass
class OnesPolicy:
    """ONES (Bian et al., SC'21): the evolutionary search, its population kept from round to round.

    `config` is the search's (policies.evolutionary.EvolutionConfig); `settings` the p-mean and
    restart factor with which options are valued and the reported objective computed
    (Pollux's); `seed` seeds the search's random generator.
    """

    config: EvolutionConfig = field(default_factory=EvolutionConfig)
    settings: Settings = field(default_factory=lambda: Settings(p=-1.0, restart_cost_s=30.0, unallocated_penalty=100.0))
    seed: int = 0
    name: ClassVar[str] = "ones"
    batch_mode: ClassVar[str] = "allocated"
    throughput_model: ClassVar[str] = "online"

    def __post_init__(self):
        self._evolution = Evolution(self.config, np.random.default_rng(self.seed))

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """The best schedule the search finds; objective the goodput MILP's at it (no bound: heuristic)."""
        t0 = time.perf_counter()
        ri = replace(round_input, settings=self.settings)
        chosen, placement, vals, generations = self._evolution.search(ri)
        opts = vals.opts
        kinds = {n.id: n.gpu_type for n in ri.cluster.nodes}
        allocations: list[JobAllocation] = []
        objective = 0.0
        for j, job in enumerate(ri.jobs):
            c = chosen[j]
            if c < 0:
                allocations.append(JobAllocation.unallocated(job.id))
                objective += opts.U0[j]
                continue
            gpus = tuple(sorted(placement[job.id]))
            objective += vals.objective[c]
            allocations.append(JobAllocation(
                job.id, gpus, int(vals.total_bsz[c]), int(vals.local_bsz[c]), int(vals.accum_steps[c]),
                float(opts.goodput[c]), float(opts.speedup[c]),
                restarted=job.restarted_on(gpus), projected=job.projected_on(kinds[gpus[0].node])))
        verify(ri, tuple(allocations))
        return RoundResult(tuple(allocations), HEURISTIC, "evolutionary", float(objective), math.nan, math.nan, 0.0,
                           time.perf_counter() - t0, True, f"{generations} generations")
