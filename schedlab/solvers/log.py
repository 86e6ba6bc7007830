"""The solvers' own logs, on stderr when asked (`schedlab solve --solver-log`).

A context, not a setting: where a solver's log goes is the caller's process's business, never a
round's (a service must not let a request write its logs). Threads that a solver starts copy the
context (contextvars.copy_context), so a race logs both searches.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["solver_log_on", "solver_log_to_stderr", "to_stderr"]

_ON: ContextVar[bool] = ContextVar("schedlab_solver_log", default=False)


@contextmanager
def solver_log_to_stderr() -> Iterator[None]:
    """Within this block every solver writes its log to stderr."""
    token = _ON.set(True)
    try:
        yield
    finally:
        _ON.reset(token)


def solver_log_on() -> bool:
    """Whether this context asked for solver logs (within `solver_log_to_stderr`)."""
    return _ON.get()


def to_stderr(line: str) -> None:
    """A log line of a solver that hands them to a callback (CP-SAT)."""
    print(line, file=sys.stderr, flush=True)
