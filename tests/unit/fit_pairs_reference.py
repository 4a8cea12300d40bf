"""Brute-force references for the pair-selected fits: the selected pairs listed one by one.

Every reference below builds the explicit list of (query, key) pairs with Python loops over
(sequence, query, key), then applies each paper's rule to the list of paired rows, so nothing
here shares code with rfkit's prefix sums, masks or exclusion bookkeeping.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy.linalg import sqrtm
from scipy.optimize import minimize_scalar


def pair_list(Q, K, rule, pad=None, mask=None, exclude=None):
    """``(qids, kids)``: (sequence, row) of the query and the key of every selected pair.

    ``Q`` (S, n, d), ``K`` (S, M, d); ``rule`` "all" (every query with every key of every
    sequence), "sequence", "causal" or "mask"; ``pad`` (S, M) True = padded; ``exclude``
    (idx, valid) of shape (S, n, s): pairs of one sequence removed.
    """
    S, n, _ = Q.shape
    M = K.shape[1]
    removed = set()
    if exclude is not None:
        idx, valid = (np.broadcast_to(a, (S, n, a.shape[-1])) for a in exclude)
        for s in range(S):
            for i in range(n):
                for t in range(idx.shape[-1]):
                    if valid[s, i, t]:
                        removed.add((s, i, int(idx[s, i, t])))
    qids, kids = [], []
    for s in range(S):
        for i in range(n):
            for s2 in range(S) if rule == "all" else (s,):
                for j in range(M):
                    if pad is not None and pad[s2, j]:
                        continue
                    if rule == "causal" and j > i:
                        continue
                    if rule == "mask" and not mask[s, i, j]:
                        continue
                    if s2 == s and (s, i, j) in removed:
                        continue
                    qids.append((s, i))
                    kids.append((s2, j))
    return qids, kids


def paired_rows(Q, K, qids, kids):
    X = np.array([Q[s, i] for s, i in qids])
    Y = np.array([K[s, j] for s, j in kids])
    return X, Y


def root(rho):
    """OPRF's optimum (Likhosherstov et al. (NeurIPS 2022)) for the mean squared norm ``rho * d``."""
    return (1.0 - 2.0 * rho - np.sqrt((2.0 * rho + 1.0) ** 2 + 8.0 * rho)) / 16.0


def oprf_ref(X, Y):
    return root(np.mean(np.sum((X + Y) ** 2, axis=1)) / X.shape[1])


def sderf_ref(X, Y):
    Z = X + Y
    lam, V = np.linalg.eigh(Z.T @ Z / len(Z))
    return (V * root(np.maximum(lam, 0.0))) @ V.T


def aderf_ref(X, Y):
    P, d = X.shape
    M1, M2 = X.T @ X / P, Y.T @ Y / P
    cross = np.mean(np.sum(X * Y, axis=1))
    R1 = np.real(sqrtm(M1))
    C = np.real(sqrtm(R1 @ M2 @ R1))
    R1i = np.linalg.inv(R1)
    G = np.real(sqrtm(R1i @ C @ R1i))
    return root((2.0 * np.trace(C) + 2.0 * cross) / d), 0.5 * (G + G.T)


def saderf_ref(X, Y):
    d = X.shape[1]
    qx, qy = np.mean(X**2, axis=0), np.mean(Y**2, axis=0)
    psi = (qy / qx) ** 0.25
    cross = np.mean(np.sum(X * Y, axis=1))
    return psi, root((np.sum(psi**2 * qx) + np.sum(qy / psi**2) + 2.0 * cross) / d)


def cexp_mean_ref(X, Y):
    return np.sqrt(np.abs(Y.mean(axis=0)) / np.abs(X.mean(axis=0)))


def _second_moment(rows, ids, ddof):
    """Unbiased second moment with reliability weights: the weight of a row is its number of pairs."""
    P = len(rows)
    mu = rows.mean(axis=0)
    ss = np.sum((rows - mu) ** 2, axis=0)
    v2 = sum(c * c for c in Counter(ids).values())
    return ss / (P - ddof * v2 / P) + mu**2


def cexp_variance_ref(X, Y, qids, kids, ddof=1):
    return (_second_moment(Y, kids, ddof) / _second_moment(X, qids, ddof)) ** 0.25


def gerf_objective_ref(A, t, d):
    """Mean over the pairs of the log relative second moment, t the pair values (docs page *Theory*, 1a)."""
    u = 1.0 / (1.0 - 8.0 * A)
    head = 0.5 * d * np.log((1.0 - 4.0 * A) ** 2 / (1.0 - 8.0 * A))
    return head + np.mean(np.logaddexp(t, -t * u)) - np.log(2.0)


def gerf_ref(t, d):
    """Minimiser of :func:`gerf_objective_ref` over A < 1/8 (fine grid in log u, then bounded Brent)."""

    def J(v):
        return gerf_objective_ref(-np.expm1(-v) / 8.0, t, d)

    grid = np.linspace(-20, 20, 4001)
    k = int(np.argmin([J(v) for v in grid]))
    res = minimize_scalar(
        J, bounds=(grid[max(k - 1, 0)], grid[min(k + 1, 4000)]), method="bounded", options={"xatol": 1e-13}
    )
    return float(-np.expm1(-res.x) / 8.0)


def log_second_moment(a, Z):
    """Mean over pairs of the log second moment of an OPRF/SDERF/ADERF feature, up to a constant.

    ``a`` the eigenvalues of A (d,) in the basis of the rows of ``Z`` (z = G x + G^-T y, or x + y).
    """
    return np.sum(0.5 * np.log((1.0 - 4.0 * a) ** 2 / (1.0 - 8.0 * a))) + np.mean(
        np.sum(Z**2 / (1.0 - 8.0 * a), axis=1)
    )
