"""Reproduce the Pollux artifact's table: `python experiments/pollux_artifact.py [--json]`."""

import sys
from pathlib import Path

from schedlab.experiments.pollux_artifact import main

if __name__ == "__main__":
    sys.exit(main(config=Path(__file__).parent / "configs" / "pollux_artifact.toml"))
