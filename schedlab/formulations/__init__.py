"""Round formulations, one registry: a name -> a function from a RoundInput to its RoundModel.

- `goodput`: Pollux's goodput with p-mean fairness as Sia's configuration MILP (options.py,
  goodput.py; freeze levels folded in when a job opts in, freezing.py).
- `joint`: goodput with every GPU's variability tier and the topology's spread priced in
  (joint_options.py, joint.py).
- `placement`: PAL's exact placement of jobs with fixed GPU counts (placement_problem.py, the
  model placement.py, PAL's greedy placement_greedy.py, windows placement_windows.py, the
  round placement_round.py).
"""

from __future__ import annotations

from collections.abc import Callable

from schedlab.formulations.goodput import goodput_model
from schedlab.formulations.joint import joint_model
from schedlab.formulations.placement_round import placement_model
from schedlab.milp import RoundModel
from schedlab.state import RoundInput

FORMULATIONS: dict[str, Callable[[RoundInput], RoundModel]] = {
    "goodput": goodput_model,
    "joint": joint_model,
    "placement": placement_model,
}

__all__ = ["FORMULATIONS", "RoundModel"]
