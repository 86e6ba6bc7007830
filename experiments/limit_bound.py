"""Time limits against round size: `python experiments/limit_bound.py [--limit-s 5] [--json]`."""

import sys

from schedlab.experiments.limit_bound import main

if __name__ == "__main__":
    sys.exit(main())
