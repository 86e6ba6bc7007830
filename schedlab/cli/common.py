"""What every subcommand shares: its error line and argparse types for bounded numbers."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

__all__ = ["COUNT", "POSITIVE_S", "fail", "number"]


def fail(message: str) -> int:
    """Print `schedlab: error: message` on stderr; the exit status of a usage error (2)."""
    print(f"schedlab: error: {message}", file=sys.stderr)
    return 2


def number(kind: type, low: float, high: float = math.inf, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type for a flag that is no round field: a finite `kind` in [low, high]
    ((low, high] with low_open); argparse names the flag in the error. Flags that are round
    fields (--time-limit, --solver) go into the round and are checked with it."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
            bounds = f"in {'(' if low_open else '['}{low:g}, {high:g}]" if high < math.inf else (
                f"{'>' if low_open else '>='} {low:g}")
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value
    return parse


POSITIVE_S = number(float, 0.0, 1e9, low_open=True)  # seconds, as the schema bounds them
COUNT = number(int, 1)
