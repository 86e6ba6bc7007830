"""Calibrated throughput tables: measure (harness, zoo: need torch), write, fit (table: no torch)."""
