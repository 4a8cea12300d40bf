"""Scrambled Sobol' points for ``projection="qmc"``: direction numbers, linear matrix scramble and
digital shift, and the Gaussian quantile transform (see :mod:`rfkit.projections`)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..exceptions import InvalidParameterError

_SOBOL_MAX_DIM = 21201
_SOBOL_MAX_LOG2 = 30  # scipy's Sobol' engine: at most 2^30 points
_SOBOL_DIGITS = 52  # b: digits per coordinate; (y + 1/2) 2^-52 is exact in float64
_QMC_CHUNK = 1 << 16  # points x dims per block of the digits-to-Gaussian transform (L2-sized)


def _sobol_log2(m: int) -> int:
    """:math:`k = \\lceil \\log_2 m \\rceil`: the draw uses the first :math:`2^k` Sobol' points."""
    return (m - 1).bit_length()


@lru_cache(maxsize=1)
def _direction_numbers() -> tuple[np.ndarray, np.ndarray]:
    """Joe & Kuo's primitive polynomials and initial direction numbers (``poly`` (21201,), ``vinit`` (21201, 18)).

    Read from the data file that SciPy ships with :class:`scipy.stats.qmc.Sobol`
    (``scipy/stats/_sobol_direction_numbers.npz``; Joe & Kuo (SIAM J. Sci. Comput. 2008), the
    ``new-joe-kuo-6.21201`` set) without importing :mod:`scipy.stats`, which takes most of a
    second.
    """
    spec = importlib.util.find_spec("scipy")
    where = [] if spec is None or spec.submodule_search_locations is None else spec.submodule_search_locations
    for folder in where:
        path = Path(folder) / "stats" / "_sobol_direction_numbers.npz"
        if path.is_file():
            with np.load(path) as z:
                return np.asarray(z["poly"], dtype=np.int64), np.asarray(z["vinit"], dtype=np.int64)
    raise InvalidParameterError(  # pragma: no cover - SciPy is a dependency and ships the file
        "`projection='qmc'` needs the Sobol' direction numbers that SciPy ships "
        "(scipy/stats/_sobol_direction_numbers.npz), and they were not found; reinstall SciPy."
    )


@lru_cache(maxsize=64)
def _sobol_columns(k: int, d: int) -> np.ndarray:
    r"""Generator columns :math:`C_j[:, c]` of the unscrambled Sobol' sequence, as b-digit integers (k, d).

    Column ``c`` is the point of index :math:`2^c` (natural order), i.e. scipy's point at Gray-code
    position :math:`2^{c+1} - 1`: the direction number :math:`v_{j,c} = m_{j,c}\,2^{-(c+1)}`, whose
    integers :math:`m_{j,c}` follow Bratley & Fox's recurrence (ACM TOMS 14, 1988, eq. 2) from Joe
    & Kuo's initial values: for the primitive polynomial
    :math:`x^s + a_1 x^{s-1} + \dots + a_{s-1} x + 1` of coordinate :math:`j`,
    :math:`m_c = 2 a_1 m_{c-1} \oplus 4 a_2 m_{c-2} \oplus \dots \oplus 2^s m_{c-s} \oplus m_{c-s}`
    (coordinate 0: every :math:`m_c = 1`). The same numbers as :class:`scipy.stats.qmc.Sobol` with
    ``bits=30`` (tested), here in the top ``c + 1`` of ``b`` digits.
    """
    poly, vinit = _direction_numbers()
    m = np.zeros((d, max(k, 1)), dtype=np.int64)
    m[0, :] = 1
    for j in range(1, d):
        p = int(poly[j])
        s = p.bit_length() - 1  # degree of the polynomial
        m[j, :s] = vinit[j, :s][: m.shape[1]]
        for c in range(s, k):
            new = m[j, c - s] ^ (m[j, c - s] << s)
            for i in range(1, s):
                if (p >> (s - i)) & 1:
                    new ^= m[j, c - i] << i
            m[j, c] = new
    shifts = _SOBOL_DIGITS - 1 - np.arange(k, dtype=np.int64)  # digit c+1 from the top: value 2^-(c+1)
    cols = np.ascontiguousarray((m[:, :k] << shifts[None, :]).T)
    cols.setflags(write=False)
    return cols


def _scrambled_columns(R: np.ndarray, *, scramble: str = "lms") -> np.ndarray:
    """Columns of :math:`L_j C_j` (T, k, d) as b-digit integers, one set per draw.

    ``R`` (T, k + 1, d) holds uniform b-digit integers: ``R[:, s]`` (s < k) fills the digits below
    the diagonal of column ``s`` of :math:`L_j` (only the first k columns of :math:`L_j` meet the
    nonzero digits of the first :math:`2^k` points); ``R[:, k]`` is the shift :math:`e_j`.
    ``scramble="shift"`` leaves :math:`L_j = I` (digital shift only; for comparisons).
    """
    T, k1, d = R.shape
    k = k1 - 1
    b = _SOBOL_DIGITS
    C = _sobol_columns(k, d)
    if scramble != "lms":
        return np.broadcast_to(C, (T, k, d))
    # column s of L_j: the diagonal digit s (value 2^(b-1-s)) and uniform digits below it
    diag = np.left_shift(np.int64(1), b - 1 - np.arange(k, dtype=np.int64))[:, None]
    Lcol = (R[:, :k] & (diag - 1)) | diag
    # (L_j C_j)[:, c] = XOR over the digits s <= c set in C_j[:, c] of L_j[:, s]
    V = np.zeros((T, k, d), dtype=np.int64)
    for c in range(k):
        for s in range(c + 1):
            sel = -((C[c] >> (b - 1 - s)) & 1)  # all ones where digit s of C_j[:, c] is set
            if sel.any():
                V[:, c] ^= Lcol[:, s] & sel
    return V


def _net_digits(V: np.ndarray, shift: np.ndarray, m: int) -> np.ndarray:
    """Digits of the first ``m`` points, (T, m, d): :math:`y_i = e \\oplus \\bigoplus_{c: i_c = 1} V[:, c]`."""
    T, k, d = V.shape
    Y = np.empty((T, 1 << k, d), dtype=np.int64)
    Y[:, 0] = shift
    for c in range(k):  # points 2^c .. 2^(c+1)-1 differ from points 0 .. 2^c-1 by column c
        h = 1 << c
        np.bitwise_xor(Y[:, :h], V[:, c, None, :], out=Y[:, h : 2 * h])
    return Y[:, :m]


def _scrambled_sobol_normal(R: np.ndarray, m: int, d: int, *, scramble: str = "lms") -> np.ndarray:
    """:math:`\\Phi^{-1}` of the randomised Sobol' points (cell midpoints), shape (T, m, d), float64."""
    from scipy.special import ndtri  # SciPy loads only when a QMC draw is asked for

    T, k1, _ = R.shape
    V = _scrambled_columns(R, scramble=scramble)
    out = np.empty((T, m, d))
    one = np.int64(0x3FF0000000000000)  # exponent of 1.0: (y | one) viewed as float64 is 1 + y 2^-52
    offset = 1.0 - 2.0 ** -(_SOBOL_DIGITS + 1)
    step = max(1, _QMC_CHUNK // ((1 << (k1 - 1)) * d))
    for t0 in range(0, T, step):  # blocks of draws: digits and transform stay in cache
        Y = _net_digits(V[t0 : t0 + step], R[t0 : t0 + step, k1 - 1], m)
        u = (Y | one).view(np.float64)
        u -= offset  # exact (Sterbenz): (y + 1/2) 2^-52, in (0, 1)
        ndtri(u, out=out[t0 : t0 + step])
    return out
