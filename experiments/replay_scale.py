"""Replay cost at scale: `python experiments/replay_scale.py (--jobs N | --workload W) --nodes K --policy P`."""

import sys

from schedlab.experiments.replay_scale import main

if __name__ == "__main__":
    sys.exit(main())
