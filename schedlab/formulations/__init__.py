"""Round formulations, one registry: a name -> a Formulation, which builds a round's RoundModel.

- `goodput`: Pollux's goodput with p-mean fairness as Sia's configuration MILP (options.py,
  goodput.py; freeze levels folded in when a job opts in, freezing.py).
- `joint`: goodput with every GPU's variability tier and the topology's spread priced in
  (joint_options.py, joint.py).
- `placement`: PAL's exact placement of jobs with fixed GPU counts (placement_problem.py, the
  model placement.py, PAL's greedy placement_greedy.py, windows placement_windows.py, the
  round placement_round.py).

Each entry also declares what splitting a round into parts (schedlab.partition, POP) needs to
know of its model: how many jobs a part may hold, whether a part must keep racks whole, and how
to value an answer the model did not find itself (a partitioned one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from schedlab.formulations.freezing import enumerate_freeze_options, fold_freeze_levels, has_freezing
from schedlab.formulations.goodput import allocation_objective, goodput_model
from schedlab.formulations.joint import allocation_objective as joint_objective
from schedlab.formulations.joint import joint_model
from schedlab.formulations.joint_options import enumerate_joint_options
from schedlab.formulations.options import enumerate_options
from schedlab.formulations.placement_round import placement_model
from schedlab.milp import RoundModel
from schedlab.state import JobAllocation, RoundInput

__all__ = ["FORMULATIONS", "Formulation", "RoundModel"]


@dataclass(frozen=True)
class Formulation:
    """A registry entry: `build` makes a round's model (calling the entry calls it).

    jobs_per_part
        With settings.partitions 0, a round of more jobs is split into parts of at most this
        many (schedlab.partition.auto_partitions): about what one core solves in a few seconds.
    whole_racks
        The model prices the topology (a spread within a rack, across racks), so a part keeps
        every rack whole and no spread it can choose is cut.
    value
        The model's objective at any allocation of a round (an answer it did not find itself,
        e.g. a partitioned one), in the units of its bound; None where the formulation has none.
    """

    build: Callable[[RoundInput], RoundModel]
    jobs_per_part: int
    whole_racks: bool = False
    value: Callable[[RoundInput, tuple[JobAllocation, ...]], float] | None = None

    def __call__(self, round_input: RoundInput) -> RoundModel:
        """The round's model (`build`)."""
        return self.build(round_input)


def _goodput_value(round_input: RoundInput, allocations: tuple[JobAllocation, ...]) -> float:
    """goodput.allocation_objective over every shape of the round's options, freeze levels
    folded in as goodput_model folds them."""
    enumerate_all = enumerate_freeze_options if has_freezing(round_input) else enumerate_options
    return allocation_objective(enumerate_all(round_input, prune=False), allocations)


def _joint_value(round_input: RoundInput, allocations: tuple[JobAllocation, ...]) -> float:
    """joint.allocation_objective over every option of the round, freeze levels folded in as
    joint_model folds them."""
    opts = enumerate_joint_options(round_input, prune=False)
    if has_freezing(round_input):
        opts = fold_freeze_levels(round_input, opts, prune=False)
    return joint_objective(opts, allocations)


FORMULATIONS: dict[str, Formulation] = {
    # a part of 10,000 jobs (20,000 GPUs) solves in ~3 s on one core
    "goodput": Formulation(goodput_model, jobs_per_part=10_000, value=_goodput_value),
    # a part of 1,000 jobs (2,048 GPUs with PAL's variability, 32 racks) solves in ~1 s on one core
    "joint": Formulation(joint_model, jobs_per_part=1_000, whole_racks=True, value=_joint_value),
    "placement": Formulation(placement_model, jobs_per_part=10_000),
}
