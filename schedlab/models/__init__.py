"""Performance models: the physics of jobs and hardware. Knows nothing of solvers.

efficiency (statistical efficiency, goodput, the best batch), throughput (Pollux's step-time
model and its fit), freezing (layer groups and the frozen penalty), variability (PAL's per-GPU
slowdowns) and profiles (the shipped applications); import them from their modules.
"""

__all__: list[str] = []  # the models live in the submodules
