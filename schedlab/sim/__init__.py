"""The simulator: round-by-round replays of job traces under any policy, in a simulated world.

engine (the loop), world (ReplayConfig, WORLDS, the cluster's physics), kinds (jobs that train
to an epoch vs jobs of fixed work), view (what a policy sees of a job), jobs (a job's state and
how it advances), truth (what applications really do), metrics (the summary). The public entry
point is `schedlab.replay(trace, policy, world=..., **options)` (schedlab.replay_api), which
loads a trace and runs it here.
"""

__all__: list[str] = []
