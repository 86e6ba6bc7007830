"""Reproduce the Pollux artifact's table: `python experiments/pollux_artifact.py [--json]`."""

import sys

from schedlab.experiments.pollux_artifact import main

if __name__ == "__main__":
    sys.exit(main())
