"""Refit the shipped application profiles: `python experiments/refit_profiles.py [--refit]`.

Fits every Pollux application's throughput model to its measured tables and prints each fit's
step-time RMSLE; with --refit it also rewrites schedlab/data/pollux/profiles.json, which
`schedlab.models.profiles.shipped_profiles` reads (tests check it matches a fresh fit).
"""

from __future__ import annotations

import argparse
import json
import sys

from schedlab.models.profiles import profiles_path, refit

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print each application's fit; with --refit write them to profiles.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refit", action="store_true", help="refit and rewrite profiles.json")
    args = parser.parse_args(argv)
    fitted = refit()
    for app, v in fitted.items():
        print(f"{app:12s} step-time RMSLE {v['fit_rmsle']:.4f}")
    if args.refit:
        profiles_path().write_text(json.dumps(fitted, indent=2) + "\n")
        print(f"wrote {profiles_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
