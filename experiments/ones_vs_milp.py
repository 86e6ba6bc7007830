"""ONES-style search vs the exact MILP: `python experiments/ones_vs_milp.py [--json]`."""

import sys
from pathlib import Path

from schedlab.experiments.ones_vs_milp import main

if __name__ == "__main__":
    sys.exit(main(config=Path(__file__).parent / "configs" / "ones_vs_milp.toml"))
