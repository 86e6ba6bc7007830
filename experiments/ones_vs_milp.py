"""ONES-style search vs the exact MILP: `python experiments/ones_vs_milp.py [--json]`."""

import sys

from schedlab.experiments.ones_vs_milp import main

if __name__ == "__main__":
    sys.exit(main())
