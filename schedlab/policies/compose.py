"""Compositions ALLOC+PLACE: an allocation policy decides, a placement policy places.

ALLOC's schedule() decides which jobs run, on how many GPUs and at what batch; PLACE
(policies.placement, without its queue) then places exactly those jobs at those GPU counts on
the cluster's concrete GPUs (its round asks, per job, for the allocated GPUs and total batch:
policies.placement.gang_round). Each job keeps its allocation (batch, goodput and speedup:
ALLOC's estimates) on the placed GPUs, restarted if they are not its current ones. The result
is ALLOC's RoundResult (its status, objective, bound and gap: the allocation model's) with the
placed GPUs, both steps' times added and the placement's status and objective in its message;
batch_mode and throughput_model are ALLOC's, since ALLOC decides the batches and values the jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from schedlab.policies.base import Policy
from schedlab.policies.placement import PlacementPolicy, gang_round
from schedlab.state import RoundInput, RoundResult
from schedlab.verify import verify

__all__ = ["SEPARATOR", "Composition"]

SEPARATOR = "+"


@dataclass
class Composition:
    """ALLOC+PLACE (module docstring); make_policy builds it from its name."""

    alloc: Policy
    place: PlacementPolicy

    @property
    def name(self) -> str:
        """ALLOC+PLACE, the registry names of the two policies."""
        return f"{self.alloc.name}{SEPARATOR}{self.place.name}"

    @property
    def batch_mode(self) -> str:
        """ALLOC's: it decides the batches."""
        return self.alloc.batch_mode

    @property
    def throughput_model(self) -> str:
        """ALLOC's: it values the jobs."""
        return self.alloc.throughput_model

    @property
    def type_blind(self) -> bool:
        """ALLOC's: whether it sees one model per job on every GPU type (so does a policy that declares nothing)."""
        return bool(getattr(self.alloc, "type_blind", True))

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """ALLOC's allocation on the GPUs PLACE chooses for it, verified (module docstring)."""
        allocated = self.alloc.schedule(round_input)
        running = [a for a in allocated.allocations if a.gpus]
        placed = self.place.place(gang_round(round_input, {a.job_id: a.num_gpus for a in running},
                                             {a.job_id: a.total_bsz for a in running}))
        gpus = {a.job_id: a.gpus for a in placed.allocations}
        jobs = {job.id: job for job in round_input.jobs}
        allocations = tuple(replace(a, gpus=gpus[a.job_id], restarted=jobs[a.job_id].restarted_on(gpus[a.job_id]))
                            if a.gpus else a for a in allocated.allocations)
        verify(round_input, allocations)
        message = f"placement {self.place.name}: {placed.status}, objective {placed.objective:.6g}"
        return replace(allocated, allocations=allocations, solver=f"{allocated.solver}{SEPARATOR}{placed.solver}",
                       build_s=allocated.build_s + placed.build_s, solve_s=allocated.solve_s + placed.solve_s,
                       message="; ".join(m for m in (allocated.message, message) if m))
