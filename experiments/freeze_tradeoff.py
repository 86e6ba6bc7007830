"""Layer freezing vs no freezing and a static schedule: `python experiments/freeze_tradeoff.py [--json]`."""

import sys
from pathlib import Path

from schedlab.experiments.freeze_tradeoff import main

if __name__ == "__main__":
    sys.exit(main(configs=Path(__file__).parent / "configs"))
