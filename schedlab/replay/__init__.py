"""Round-by-round replays of job traces under any policy, in a simulated world.

engine (the loop), world (ReplayConfig, WORLDS, the cluster's physics), kinds (jobs that train
to an epoch vs jobs of fixed work), view (what a policy sees of a job), jobs (a job's state and
how it advances), truth (what applications really do), metrics (the summary).

The package is also the public entry point: `schedlab.replay(trace, policy, world=..., **options)`
calls schedlab.replay_api.replay (see its docstring), loaded on the first call so that importing
schedlab stays light. A name cannot be both a subpackage and a function of schedlab (importing
schedlab.replay.engine sets schedlab.replay to this package), so the package is callable.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__: list[str] = []


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """schedlab.replay_api.replay: replay a trace under a policy (see its docstring)."""
        return importlib.import_module("schedlab.replay_api").replay(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
