"""Calibrated throughput tables: measure (harness, zoo: need torch), write, fit (table: no torch)."""

__all__: list[str] = []  # import from the submodules: harness and zoo load torch
