"""PAL placement vs Packed-Sticky, PM-First and the exact MILP: `python experiments/pal_variability.py [--json]`."""

import sys
from pathlib import Path

from schedlab.experiments.pal_variability import main

if __name__ == "__main__":
    sys.exit(main(configs=Path(__file__).parent / "configs"))
