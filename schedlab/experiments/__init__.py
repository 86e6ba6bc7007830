"""Experiments that regenerate the README's tables; each has a thin script in experiments/."""
