"""Benchmarks and what the experiments in experiments/ build on.

rounds   random allocation rounds from the shipped profiles, random placement rounds
latency  the solve-latency benchmarks of `schedlab bench` (one size; the scale table)
fuzz     fuzzed valid and hostile rounds and an answer checker apart from schedlab.verify
sweeps   the experiments' shared sweeps (import it by name: it loads pandas and matplotlib)
soak     `schedlab serve` under traffic, worker kills and hang-ups (import it by name; Linux)
"""

from schedlab.bench.fuzz import capacity_violations, mutated_case, run_mutated, run_valid, valid_round
from schedlab.bench.latency import SCALE_GPUS, run_bench, run_scale, scale_rounds
from schedlab.bench.rounds import random_placement_round, random_round

__all__ = ["SCALE_GPUS", "capacity_violations", "mutated_case", "random_placement_round", "random_round", "run_bench",
           "run_mutated", "run_scale", "run_valid", "scale_rounds", "valid_round"]
