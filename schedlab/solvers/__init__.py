"""How a formulation is solved: array paths (highspy, CP-SAT), Pyomo, and the greedy fallback.

registry (SOLVERS: the names a round's settings.solver takes), highs_direct, cpsat, portfolio,
pyomo_backend and pyomo_options (the solvers), outcome and log (what they share); import
them from their modules.
"""

__all__: list[str] = []  # the solvers live in the submodules
