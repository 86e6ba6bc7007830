"""One family of errors: every message names the field and says how to fix it."""

from __future__ import annotations

__all__ = ["ConfigError", "DecodeError", "InputError", "SchedlabError", "SolverError", "VerificationError"]


class SchedlabError(Exception):
    """Base class of every error schedlab raises on purpose."""


class InputError(SchedlabError, ValueError):
    """A round input is malformed; `problems` lists one message per bad field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid round input:\n  - " + "\n  - ".join(self.problems))

    def __reduce__(self):  # across processes (a benchmark's, a partition's) with its problems, not its message
        return type(self), (self.problems,)


class ConfigError(SchedlabError, ValueError):
    """A workload, trace or replay setting is unusable; the message names it and the fix."""


class VerificationError(SchedlabError):
    """An allocation broke a rule of the round (capacity, bounds, one config per job)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("allocation failed verification:\n  - " + "\n  - ".join(self.problems))

    def __reduce__(self):  # across processes with its problems, as InputError
        return type(self), (self.problems,)


class DecodeError(SchedlabError):
    """A solver's point does not map onto concrete GPUs (a model or solver fault): solve_round
    rejects the point and answers with the verified greedy allocation instead."""


class SolverError(SchedlabError):
    """A solver is unknown, unavailable, or failed without a usable answer."""
