"""Tables for people and spreadsheets: the CSV and Markdown/LaTeX helpers of replay, sweeps and
reports. pandas and tabulate are the callers' (and loaded on first use), not `import schedlab`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["spreadsheet_safe", "text_table"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every text cell that a spreadsheet would run as a formula (a job named
    "=HYPERLINK(...)") quoted by a leading apostrophe: names written to CSV are data."""
    def safe(value: Any) -> Any:
        return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value

    text = frame.select_dtypes(include=["object", "string"]).columns
    return frame.assign(**{c: frame[c].map(safe) for c in text}) if len(text) else frame


def text_table(frame: pd.DataFrame, fmt: str, right: list[bool]) -> str:
    """A frame of display-ready cells as a Markdown ("md") or booktabs LaTeX ("latex") table, the
    columns flagged in `right` right-aligned; cells are printed as written (no number parsing)."""
    from tabulate import tabulate

    return tabulate(frame, headers="keys", tablefmt={"md": "github", "latex": "latex_booktabs"}[fmt],
                    showindex=False, disable_numparse=True, colalign=["right" if r else "left" for r in right])

