"""Fuzzed rounds: `python experiments/fuzz_rounds.py --valid N --mutated M [--json]`."""

import sys

from schedlab.experiments.fuzz_rounds import main

if __name__ == "__main__":
    sys.exit(main())
