"""Performance models: the physics of jobs and hardware. Knows nothing of solvers."""
