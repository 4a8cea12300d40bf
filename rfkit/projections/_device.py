"""Directions drawn on the device by the backend's own generator (``draws = "backend"``).

The same distributions as the NumPy draws of :mod:`rfkit.projections`, assembled the same way
(QR with the sign fix, chi norms, simplex vertices, Hadamard products, the scrambled Sobol' net)
with the array library's operations, so nothing leaves the device. Given the same random
ingredients the assembled directions equal the NumPy ones to round-off (tested); the
ingredients themselves come from :class:`~rfkit._backend_random.BackendGenerator`, so a draw is
statistically equivalent to, not the same numbers as, a NumPy draw.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend import Backend
from .._backend_random import BackendGenerator
from ..exceptions import NumericalOverflowError
from ._sobol import _SOBOL_DIGITS, _sobol_columns, _sobol_log2

__all__ = ["device_ingredients", "assemble_on"]

_SIMPLEX_PLUS_SWEEPS = 8  # as the NumPy draws


def device_ingredients(kind: str, gen: BackendGenerator, T: int, m: int, d: int, hb: int) -> dict[str, Any]:
    """The random numbers of ``T`` draws of ``kind`` on ``gen``'s device (the NumPy draw's ingredients)."""
    if kind == "iid":
        return {"W": gen.standard_normal((T, m, d))}
    xp = gen.backend.xp
    if kind in ("orthogonal", "orthogonal-fixed", "simplex", "simplex-plus"):
        from . import _reduced_partial  # lazy: the package imports this module; one block layout

        if _reduced_partial(kind, m, d):  # full d x d blocks, then the d x (m % d) partial block
            out = {"G": gen.standard_normal((T, m // d, d, d)), "P": gen.standard_normal((T, d, m % d))}
        else:
            out = {"G": gen.standard_normal((T, -(-m // d), d, d))}
        if kind != "orthogonal-fixed":
            out["norms"] = xp.sqrt(gen.chisquare(d, (T, m)))
        return out
    if kind == "qmc":
        return {"R": gen.integers(1 << _SOBOL_DIGITS, (T, _sobol_log2(m) + 1, d))}
    dp = 1 << max(0, int(np.ceil(np.log2(d))))
    nb = -(-m // dp)
    bits = gen.integers(2, (T, nb, hb, dp))
    one = gen.backend.scalar(1.0, xp.float64)
    signs = xp.where(bits == 1, one, -one)
    return {"signs": signs, "norms": xp.sqrt(gen.chisquare(d, (T, m)))}


def assemble_on(bk: Backend, kind: str, ing: dict[str, Any], m: int, d: int) -> Any:
    """Directions (T, m, d), float64, on ``bk``'s device from the ingredients (as ``_assemble``)."""
    xp = bk.xp
    if kind == "iid":
        return ing["W"]
    if kind in ("orthogonal", "orthogonal-fixed"):
        G = ing["G"]
        T, nb = int(G.shape[0]), int(G.shape[1])
        blocks = [xp.reshape(_haar_rows(bk, G), (T, nb * d, d))] if nb else []
        if "P" in ing:  # the reduced partial block: k Haar rows from a d x k QR
            blocks.append(_haar_rows(bk, ing["P"]))
        rows = (blocks[0] if len(blocks) == 1 else xp.concat(blocks, axis=1))[:, :m, :]
        if kind == "orthogonal-fixed":
            return rows * math.sqrt(d)
        return rows * ing["norms"][..., None]
    if kind in ("simplex", "simplex-plus"):
        H = _haar_rows(bk, ing["G"])
        T, nb = int(H.shape[0]), int(H.shape[1])
        U = _simplex_vertices(bk, d) if kind == "simplex" else _simplex_plus(bk, ing["norms"], nb, d)
        rows = U @ H
        return xp.reshape(rows, (T, nb * d, d))[:, :m, :] * ing["norms"][..., None]
    if kind == "qmc":
        return _sobol_normal(bk, ing["R"], m, d)
    return _structured(bk, ing["signs"], ing["norms"], m, d)


def _haar_rows(bk: Backend, G: Any) -> Any:
    """Rows of Haar orthogonal matrices from Gaussian stacks (d x d, or d x k for k of their rows): QR
    with ``Q diag(sign R_ii)`` (Mezzadri 2007)."""
    xp = bk.xp
    Q, R = xp.linalg.qr(G)
    s = xp.sign(xp.linalg.diagonal(R))
    s = xp.where(s == 0, xp.ones_like(s), s)  # probability zero; keeps Q orthogonal
    return xp.matrix_transpose(Q * s[..., None, :])


def _simplex_vertices(bk: Backend, d: int) -> Any:
    if d == 1:
        return bk.asarray(np.ones((1, 1)), dtype=bk.xp.float64)
    return bk.asarray((np.eye(d) - 1.0 / d) / np.sqrt(1.0 - 1.0 / d), dtype=bk.xp.float64)


def _simplex_plus(bk: Backend, norms: Any, nb: int, d: int) -> Any:
    """SimRFs+ unit directions (T, nb, d, d): Gauss-Seidel sweeps, as the NumPy draw."""
    xp = bk.xp
    T, m = int(norms.shape[0]), int(norms.shape[1])
    rho = xp.zeros((T, nb * d), dtype=xp.float64, device=bk.device)
    rho[:, :m] = norms
    rho = xp.reshape(rho, (T * nb, d))
    U = xp.zeros((T * nb, d, d), dtype=xp.float64, device=bk.device) + _simplex_vertices(bk, d)  # writable
    if d > 1:
        R = xp.sum(rho[:, :, None] * U, axis=1)
        for _ in range(_SIMPLEX_PLUS_SWEEPS):
            for i in range(d):
                Ri = R - rho[:, i, None] * U[:, i, :]
                n = xp.linalg.vector_norm(Ri, axis=1, keepdims=True)
                ok = n > 0  # a zero resultant (probability 0) keeps the direction
                U[:, i, :] = xp.where(ok, -Ri / xp.where(ok, n, xp.ones_like(n)), U[:, i, :])
                R = Ri + rho[:, i, None] * U[:, i, :]
    return xp.reshape(U, (T, nb, d, d))


def _structured(bk: Backend, signs: Any, norms: Any, m: int, d: int) -> Any:
    from scipy.linalg import hadamard  # the small Hadamard matrix is built on the host, once

    xp = bk.xp
    T, nb, hd_blocks, dp = (int(s) for s in signs.shape)
    H = bk.asarray(hadamard(dp).astype(np.float64) / np.sqrt(dp), dtype=xp.float64)
    M = H * signs[:, :, 0, None, :]
    for k in range(1, hd_blocks):
        M = M @ (H * signs[:, :, k, None, :])
    rows = xp.reshape(M[..., :d], (T, nb * dp, d))[:, :m, :]
    lengths = xp.linalg.vector_norm(rows, axis=-1, keepdims=True)
    if bk.any(lengths == 0):
        raise NumericalOverflowError(
            "A structured direction vanished on the first d coordinates; draw again."
        )
    return rows / lengths * norms[..., None]


def _sobol_normal(bk: Backend, R: Any, m: int, d: int) -> Any:
    """Gaussian quantiles of the scrambled Sobol' net (LMS + digital shift), as the NumPy draw."""
    xp = bk.xp
    T, k1 = int(R.shape[0]), int(R.shape[1])
    k = k1 - 1
    b = _SOBOL_DIGITS
    diag_np = np.left_shift(np.int64(1), b - 1 - np.arange(k, dtype=np.int64))[:, None]
    diag = bk.asarray(diag_np, dtype=xp.int64)
    Lcol = (R[:, :k, :] & (diag - 1)) | diag
    V = xp.zeros((T, k, d), dtype=xp.int64, device=bk.device)
    Cn = np.asarray(_sobol_columns(k, d))
    for c in range(k):
        acc = xp.zeros((T, d), dtype=xp.int64, device=bk.device)
        for s in range(c + 1):
            sel_np = -((Cn[c] >> (b - 1 - s)) & 1)  # all ones where digit s of C_j[:, c] is set
            if sel_np.any():
                acc = acc ^ (Lcol[:, s, :] & bk.asarray(sel_np, dtype=xp.int64))
        V[:, c, :] = acc
    Y = xp.zeros((T, 1 << k, d), dtype=xp.int64, device=bk.device)
    Y[:, 0, :] = R[:, k, :]
    for c in range(k):  # points 2^c .. 2^(c+1)-1 differ from points 0 .. 2^c-1 by column c
        h = 1 << c
        Y[:, h : 2 * h, :] = Y[:, :h, :] ^ V[:, c, None, :]
    Y = Y[:, :m, :]
    one = 0x3FF0000000000000  # exponent of 1.0: (y | one) viewed as float64 is 1 + y 2^-52
    u = bk.int64_bits_as_float64(Y | one)
    u = u - (1.0 - 2.0 ** -(b + 1))  # exact (Sterbenz): (y + 1/2) 2^-52, in (0, 1)
    return bk.ndtri(u)
