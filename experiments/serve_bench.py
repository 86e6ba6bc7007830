"""The embedding figures: `python experiments/serve_bench.py [--rounds 200] [--clients 32] [--per-client 200] [--json]`."""

import sys

from schedlab.experiments.serve_bench import main

if __name__ == "__main__":
    sys.exit(main())
