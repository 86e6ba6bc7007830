"""Placement solve time by cluster size: `python experiments/placement_scale.py [--gpus 16,32,64] [--json]`."""

import sys

from schedlab.experiments.placement_scale import main

if __name__ == "__main__":
    sys.exit(main())
