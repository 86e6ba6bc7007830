"""Bounded L-BFGS-B by scipy's own routine, without `scipy.optimize.minimize`'s wrapper.

The online fits (models.throughput.fit_throughput_params) minimize a 7-parameter loss over a
few points, thousands of times per replay (a joint replay of a Pollux workload: 2,203 fits,
57,000 evaluations). There `minimize`'s per-call and per-iteration work (its ScalarFunction,
bounds handling and the OptimizeResult of every iteration) cost as much as the loss itself:
2,203 fits took 6.5 s through `minimize`, 4.3 s through this loop. The loop is
`scipy.optimize._lbfgsb_py._minimize_lbfgsb`'s with its defaults, calling the same routine
(`_lbfgsb.setulb`, whose signature is scipy's since 1.15), so the iterates are the same doubles:
tests/test_throughput.py compares the two on random fits, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import _lbfgsb

__all__ = ["minimize_bounded"]

# scipy's defaults for method="L-BFGS-B": maxcor, ftol / machine epsilon, gtol, maxls,
# maxiter and maxfun (the last two a guard: fits stop after tens of iterations)
_M, _FACTR, _PGTOL, _MAXLS, _MAX_STEPS = 10, 2.2204460492503131e-09 / np.finfo(float).eps, 1e-5, 20, 15_000
_FG, _NEW_X = 3, 1  # setulb's task codes: evaluate at x; a new iterate


def minimize_bounded(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray,
                     bounds: Sequence[tuple[float, float]]) -> tuple[float, np.ndarray]:
    """`minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds)`'s (fun, x), for finite bounds.

    Parameters
    ----------
    fun : callable
        The value and gradient at a point; it must leave the point as it is (the loop keeps it
        to know a repeated request, as scipy's wrapper does).
    x0 : ndarray
        The start, moved into the bounds as scipy does.
    bounds : sequence of (low, high)
        A finite interval per variable.

    Returns
    -------
    (float, ndarray)
        The value at the last iterate and the iterate.
    """
    low, high = (np.ascontiguousarray(b) for b in np.array(bounds, dtype=float).T)
    n = len(low)
    x = np.clip(np.asarray(x0, dtype=float), low, high)
    kind = np.full(n, 2, dtype=np.int32)  # setulb's code for a variable bounded on both sides
    f, g = 0.0, np.zeros(n)
    wa = np.zeros(2 * _M * n + 5 * n + 11 * _M * _M + 8 * _M)
    iwa, task, ln_task = np.zeros(3 * n, np.int32), np.zeros(2, np.int32), np.zeros(2, np.int32)
    lsave, isave, dsave = np.zeros(4, np.int32), np.zeros(44, np.int32), np.zeros(29)
    at: np.ndarray | None = None  # the last point evaluated (value, grad: its value and gradient)
    evaluations = steps = 0
    while True:
        _lbfgsb.setulb(_M, x, low, high, kind, f, g, _FACTR, _PGTOL, wa, iwa, task, lsave, isave, dsave, _MAXLS,
                       ln_task)
        if task[0] == _FG:
            if at is None or not np.array_equal(x, at):  # setulb asks again at a point it has had
                at = x.copy()
                value, grad = fun(at)
                evaluations += 1
            f, g = value, np.array(grad, dtype=float)  # a copy: setulb writes into g
        elif task[0] == _NEW_X:
            steps += 1
            if steps >= _MAX_STEPS or evaluations > _MAX_STEPS:
                break
        else:  # converged, or stopped on an abnormal line search: scipy's answer either way
            break
    return float(f), x
