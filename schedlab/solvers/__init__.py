"""How a formulation is solved: array paths (highspy, CP-SAT), Pyomo, and the greedy fallback."""
