"""One cluster, every mechanism: `python experiments/joint.py [--json]`."""

import sys
from pathlib import Path

from schedlab.experiments.joint import main

if __name__ == "__main__":
    sys.exit(main(configs=Path(__file__).parent / "configs"))
