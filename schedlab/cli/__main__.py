"""`python -m schedlab.cli`: the `schedlab` command."""

import sys

from schedlab.cli import main

__all__: list[str] = []  # run, not imported

sys.exit(main())
