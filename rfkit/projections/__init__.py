r"""Random projection directions :math:`\omega_1, \dots, \omega_m \in \mathbb R^d`.

Every feature map draws its random part here. ``sample_projection`` returns an
array of shape ``(m, d)`` (or ``(T, m, d)`` for ``n_draws=T`` independent draws);
row :math:`i` is :math:`\omega_i`.

Kinds
-----
``"iid"``
    :math:`\omega_i \stackrel{iid}{\sim} \mathcal N(0, I_d)`. Every rfkit estimator
    is unbiased for :math:`\exp(x^\top y)` with these.
``"orthogonal"``
    Gaussian-marginal orthogonal random features (ORF; Yu et al. (NeurIPS 2016);
    Choromanski et al. (ICLR 2021), section 2.4). :math:`\lceil m/d\rceil` independent blocks; in each,
    :math:`G = QR` with iid :math:`\mathcal N(0,1)` entries and the Haar fix
    :math:`Q \leftarrow Q\,\mathrm{diag}(\mathrm{sign} R_{ii})` (without it NumPy's
    Householder QR gives non-uniform directions and a biased estimator); rows of
    :math:`Q^\top` are rescaled by independent :math:`\chi(d)` norms. Marginally
    :math:`\omega_i \sim \mathcal N(0, I_d)`, so estimators stay **unbiased**;
    rows are orthogonal within a block, blocks are independent. A last block of
    :math:`k = m \bmod d` rows in :math:`d >` :data:`FULL_BLOCK_MAX_DIM` is the reduced
    QR of a :math:`d \times k` Gaussian block with the same sign fix (the same Haar rows in
    :math:`O(dk^2)`); up to that dim it is cut from a :math:`d \times d` draw, as it always was.
``"orthogonal-fixed"``
    The same directions with every norm equal to :math:`\sqrt d` (Performer's
    "regularized" SMREG). **Biased for SM by design**: the positive estimator is
    unbiased for :math:`\mathrm{SMREG}(x,y)=\Lambda\,{}_0F_1(;d/2;d\|x+y\|^2/4) \le \mathrm{SM}(x,y)`
    (Choromanski et al. (ICLR 2021), Thm 1).
``"qmc"``
    Randomised quasi-Monte Carlo (RQMC): the first :math:`2^k` points of the Sobol'
    sequence (:math:`k = \lceil\log_2 m\rceil`, Joe & Kuo direction numbers as in
    :class:`scipy.stats.qmc.Sobol`; the first ``m`` kept, so balance is best when ``m``
    is a power of two), randomised per draw by Matoušek's *linear matrix scramble plus
    digital shift* (LMS + DS; Matoušek 1998, "On the L2-discrepancy for anchored boxes",
    J. Complexity 14; Owen 1997, "Monte Carlo variance of scrambled net quadrature",
    SIAM J. Numer. Anal. 34; Dick & Pillichshammer 2010, *Digital Nets and Sequences*,
    §13), mapped through the Gaussian quantile function. In base 2 with
    :math:`b = 52` digits, coordinate :math:`j` of point :math:`i` has digit vector
    :math:`x_{ij} = C_j\,\mathrm{digits}(i)` (generator matrix :math:`C_j`); the draw
    uses :math:`y_{ij} = L_j x_{ij} \oplus e_j` with :math:`L_j` a random lower-triangular
    :math:`b\times b` binary matrix with unit diagonal and :math:`e_j` a uniform random
    digit vector, independent over :math:`j` and over draws, and
    :math:`u_{ij} = \sum_r y_{ij,r} 2^{-r} + 2^{-b-1}` (the midpoint of its
    :math:`2^{-52}` cell, never 0 or 1). :math:`L_j` is nonsingular and lower
    triangular, so every draw is still a digital :math:`(t, k, d)`-net; :math:`e_j`
    makes :math:`y_{ij}` uniform on :math:`\{0,1\}^b` whatever :math:`L_j`, so each
    :math:`u_i` is uniform on the :math:`2^{-52}`-grid of :math:`[0,1)^d` (the uniform
    law at the resolution of a float64 in :math:`[\tfrac12, 1)`), each
    :math:`\omega_i = \Phi^{-1}(u_i)` is marginally :math:`\mathcal N(0, I_d)` and
    estimators stay **unbiased**; points are negatively correlated. The unscrambled
    generator columns are computed once per :math:`(k, d)` and cached; the scramble is
    linear over GF(2), so :math:`L_j C_j` costs :math:`O(k^2)` XORs per coordinate and
    the :math:`2^k` points follow by doubling (:math:`y_{i + 2^c} = y_i \oplus
    L_j C_j[:, c]`), vectorised over draws. (Earlier versions built one scrambled
    :class:`scipy.stats.qmc.Sobol` engine per draw, about ten times slower; the numbers
    drawn for a given seed changed with this implementation.)
``"simplex"``
    Simplex random features (SimRFs; Reid, Choromanski, Likhosherstov, Weller,
    ICML 2023). Within a block of :math:`d` directions the unit vectors are the
    vertices of a regular simplex centred at the origin (pairwise inner products
    :math:`-1/(d-1)`), randomly rotated by a Haar orthogonal matrix (the same Haar
    draw as ``"orthogonal"``: QR with the sign fix); norms are independent
    :math:`\chi(d)`. Each :math:`\omega_i` is marginally :math:`\mathcal N(0, I_d)`,
    so estimators stay **unbiased**. Blocks are independent; a last partial block of
    :math:`k = m \bmod d` rows keeps :math:`k` vertices of a rotated simplex. For
    :math:`d = 1` a block is one direction (no coupling). For the positive maps the
    pair covariance is lower than with orthogonal rows (exact MSE:
    :func:`rfkit.theory.mse`; Reid et al. (ICML 2023); docs page *Theory*, section 1a).
``"simplex-plus"``
    SimRFs+ (Reid et al. 2023, the weight-dependent variant): the norms
    :math:`\rho_i \sim \chi(d)` are drawn first and the block's unit directions, started at
    the simplex vertices, are moved by 8 Gauss-Seidel sweeps of
    :math:`u_i \leftarrow -r_i/\|r_i\|`, :math:`r_i = \sum_{j \ne i}\rho_j u_j` (coordinate descent
    on :math:`\|\sum_i \rho_i u_i\|^2`, the small-:math:`\|z\|` MSE of the positive maps; the
    authors' code uses 5 sweeps), then rotated by a Haar matrix. The rotation makes each
    direction uniform and independent of the norms, so rows are marginally
    :math:`\mathcal N(0, I_d)` and estimators stay **unbiased**. Cost :math:`O(d^2)` per block
    and sweep; no closed-form MSE (directions depend on all norms of the block): measure it
    with :func:`rfkit.theory.check`-style simulation. For positive features it lowers the
    MSE a further 5-20 % below ``"simplex"`` at moderate norms (docs page *Theory*, section 1a).
``"structured"``
    Structured orthogonal random features (SORF, Yu et al. 2016): directions are
    the rows of :math:`H D_1 H D_2 H D_3` (normalised Walsh-Hadamard :math:`H` of
    size :math:`d' = 2^{\lceil\log_2 d\rceil}`, random sign diagonals :math:`D_k`),
    restricted to the first :math:`d` coordinates and renormalised, with
    independent :math:`\chi(d)` norms; independent blocks are stacked for
    :math:`m > d'`. The directions are only approximately uniform, so estimators
    are **only approximately unbiased**: a direction-dependent bias of order
    :math:`O(1/\sqrt d)` (relative, at fixed :math:`\|x+y\|`) that shrinks with more
    :math:`HD` products (``hd_blocks``). ``tests/statistical/test_projections.py``
    measures it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._backend_random import BackendGenerator, as_backend_generator
from .._parallel import resolve_threads, run_blocks
from .._params import check_allocation
from .._random import check_rng
from .._validation import check_int, check_n_features, check_option
from ..exceptions import InvalidParameterError, NumericalOverflowError
from ._device import assemble_on, device_ingredients
from ._sobol import (
    _SOBOL_DIGITS,
    _SOBOL_MAX_DIM,
    _SOBOL_MAX_LOG2,
    _direction_numbers,
    _net_digits,
    _scrambled_columns,
    _scrambled_sobol_normal,
    _sobol_columns,
    _sobol_log2,
)

__all__ = [
    "PROJECTIONS",
    "UNBIASED_PROJECTIONS",
    "ProjectionKind",
    "sample_projection",
    "sample_projection_streams",
    "sample_projection_on",
    "block_sizes",
    "FULL_BLOCK_MAX_DIM",
]

ProjectionKind = Literal[
    "iid", "orthogonal", "orthogonal-fixed", "qmc", "structured", "simplex", "simplex-plus"
]
PROJECTIONS: tuple[str, ...] = (
    "iid",
    "orthogonal",
    "orthogonal-fixed",
    "qmc",
    "structured",
    "simplex",
    "simplex-plus",
)
#: Kinds whose rows are exactly N(0, I_d) marginally (estimators exactly unbiased).
UNBIASED_PROJECTIONS: tuple[str, ...] = ("iid", "orthogonal", "qmc", "simplex", "simplex-plus")
_SIMPLEX_PLUS_SWEEPS = 8
#: elements of the result per block of streams in :func:`sample_projection_streams` (a block's
#: ingredients and QR factors stay in cache; small draws run as one block, on the calling thread)
STREAM_BLOCK = 1 << 17

#: names the tests and benchmarks reach (the Sobol' construction lives in ``_sobol``)
_SOBOL_NAMES = (
    _SOBOL_DIGITS,
    _direction_numbers,
    _net_digits,
    _scrambled_columns,
    _scrambled_sobol_normal,
    _sobol_columns,
)


def block_sizes(n_features: int, dim: int) -> list[int]:
    """Return the sizes :math:`k_b` of the orthogonal blocks of ``m`` directions in ``d`` dimensions.

    Parameters
    ----------
    n_features : int
        Number of directions ``m``.
    dim : int
        Input dimension ``d``.

    Returns
    -------
    list of int
        ``m // d`` blocks of ``d``, then one of ``m % d`` when that is not zero.
    """
    full, rest = divmod(n_features, dim)
    return [dim] * full + ([rest] if rest else [])


#: largest dim whose partial block (``m % d`` rows) is still cut from a full d x d Haar draw. Above
#: it the partial block is the reduced QR of a d x (m % d) Gaussian block (O(d (m % d)^2) instead of
#: a d x d QR: d = 4096, m = 8 took over a minute). Both give the same distribution; keeping the d x d
#: draw up to 64 keeps every result drawn before (all built-in studies: dims 4 to 64) bit for bit.
FULL_BLOCK_MAX_DIM = 64


def _reduced_partial(kind: str, m: int, d: int) -> bool:
    """Whether the last, partial orthogonal block is drawn as a d x (m % d) Gaussian block."""
    return kind in ("orthogonal", "orthogonal-fixed") and m % d != 0 and d > FULL_BLOCK_MAX_DIM


def _check_kind(kind: str, n_features: int, dim: int, owner: str) -> tuple[str, int, int]:
    kind = check_option(kind, "projection", owner, PROJECTIONS)
    m = check_n_features(n_features, owner)
    d = check_int(dim, "dim", owner, low=1)
    if kind == "qmc" and d > _SOBOL_MAX_DIM:
        raise InvalidParameterError(
            f"`projection='qmc'` supports dim <= {_SOBOL_MAX_DIM} (Sobol' direction numbers). Got dim={d} instead."
        )
    if kind == "qmc" and m > 1 << _SOBOL_MAX_LOG2:
        raise InvalidParameterError(
            f"`projection='qmc'` supports n_features <= 2**{_SOBOL_MAX_LOG2} (Sobol' points). "
            f"Got n_features={m} instead."
        )
    return kind, m, d


def _check_memory(kind: str, T: int, m: int, d: int, owner: str) -> None:
    """Refuse draws whose directions and random ingredients exceed rfkit's allocation limit.

    Estimate: twice the float64 directions ``(T, m', d)`` (ingredients and assembly), where
    ``m'`` rounds ``m`` up to whole blocks for the block-structured kinds.
    """
    if kind in ("iid", "qmc") or _reduced_partial(kind, m, d):
        rows = m
    else:
        rows = -(-m // d) * d
    check_allocation(
        (2, T, rows, d),
        8,
        "the directions (T, n_features, dim) and their random numbers",
        owner,
        f"Reduce n_features={m}, dim={d} or the number of draws T={T}.",
    )


def sample_projection(
    kind: str,
    n_features: int,
    dim: int,
    *,
    rng: Any = None,
    n_draws: int | None = None,
    hd_blocks: int = 3,
) -> np.ndarray:
    """Draw projection directions.

    Parameters
    ----------
    kind : {"iid", "orthogonal", "orthogonal-fixed", "qmc", "structured", "simplex", "simplex-plus"}
        Distribution of the rows (see the module docstring).
    n_features : int
        Number of random directions ``m`` (>= 1).
    dim : int
        Input dimension ``d`` (>= 1).
    rng : {None, int, SeedSequence, Generator}, optional
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system. Types other than Generator are passed to
        :func:`numpy.random.default_rng`. Pass an int for reproducible output.
    n_draws : int, optional
        Number ``T`` of independent draws; adds a leading axis of length ``T``.
    hd_blocks : int, default=3
        Number of :math:`HD` products for ``kind="structured"``.

    Returns
    -------
    ndarray of shape (m, d) or (T, m, d), float64
    """
    owner = "sample_projection"
    kind, m, d = _check_kind(kind, n_features, dim, owner)
    T = 1 if n_draws is None else check_int(n_draws, "n_draws", owner, low=1)
    hb = check_int(hd_blocks, "hd_blocks", owner, low=1)
    _check_memory(kind, T, m, d, owner)
    gen = check_rng(rng)
    W = _assemble(kind, _ingredients(kind, gen, T, m, d, hb), m, d)
    return W[0] if n_draws is None else W


def sample_projection_streams(
    kind: str, n_features: int, dim: int, rngs: Any, *, hd_blocks: int = 3
) -> np.ndarray:
    """One draw per random stream, stacked: shape (len(rngs), m, d).

    Draw ``t`` is identical to ``sample_projection(kind, m, d, rng=rngs[t])``: each stream
    supplies its own random numbers, and the linear algebra (QR, Hadamard products) runs
    batched. The streams are taken in fixed blocks of about :data:`STREAM_BLOCK` elements of
    the result, spread over rfkit's thread pool (:func:`rfkit.threads`): each draw depends on
    its own stream only, so the result is the same for every number of threads.

    Parameters
    ----------
    kind : {"iid", "orthogonal", "orthogonal-fixed", "qmc", "structured", "simplex", "simplex-plus"}
        Distribution of the rows (as in :func:`sample_projection`).
    n_features : int
        Number of random directions ``m`` (>= 1).
    dim : int
        Input dimension ``d`` (>= 1).
    rngs : sequence of {int, SeedSequence, Generator}
        The random streams, one per draw (at least one); each is passed to
        :func:`numpy.random.default_rng`.
    hd_blocks : int, default=3
        Number of :math:`HD` products for ``kind="structured"``.

    Returns
    -------
    ndarray of shape (len(rngs), m, d), float64
        Draw ``t`` in row ``t``.
    """
    owner = "sample_projection_streams"
    kind, m, d = _check_kind(kind, n_features, dim, owner)
    hb = check_int(hd_blocks, "hd_blocks", owner, low=1)
    gens = [_stream_generator(r) for r in rngs]
    if not gens:
        raise InvalidParameterError("`rngs` must hold at least one random stream.")
    T = len(gens)
    _check_memory(kind, T, m, d, owner)
    per = _streams_per_block(kind, m, d)
    if per >= T:
        return _assemble(kind, _stream_ingredients(kind, gens, m, d, hb), m, d)
    out = np.empty((T, m, d))

    def block(t0: int) -> None:
        part = gens[t0 : t0 + per]
        out[t0 : t0 + len(part)] = _assemble(kind, _stream_ingredients(kind, part, m, d, hb), m, d)

    run_blocks(block, range(0, T, per), resolve_threads(None, owner))
    return out


def sample_projection_on(
    kind: str,
    n_features: int,
    dim: int,
    gen: BackendGenerator,
    *,
    n_draws: int | None = None,
    hd_blocks: int = 3,
) -> Any:
    """Draw projection directions on a device with the array library's own generator.

    The distributions of :func:`sample_projection` (every ``kind``), drawn by ``gen`` (a
    :class:`~rfkit._backend_random.BackendGenerator`: PyTorch's, CuPy's or NumPy's generator)
    and assembled with that library on its device; the result never leaves it. The same seed
    gives the same directions on the same kind of device; they are other numbers than
    :func:`sample_projection`'s for any seed (statistically equivalent, not bit-identical: the
    study option ``draws = "backend"``, docs page *Backends and scaling*).

    Parameters
    ----------
    kind : {"iid", "orthogonal", "orthogonal-fixed", "qmc", "structured", "simplex", "simplex-plus"}
        Distribution of the rows (as in :func:`sample_projection`).
    n_features : int
        Number of random directions ``m`` (>= 1).
    dim : int
        Input dimension ``d`` (>= 1).
    gen : BackendGenerator or torch.Generator
        The generator of the array library and device the directions are drawn on (a
        ``torch.Generator`` draws on its own device and its state advances).
    n_draws : int, optional
        Number ``T`` of independent draws; adds a leading axis of length ``T``.
    hd_blocks : int, default=3
        Number of :math:`HD` products for ``kind="structured"``.

    Returns
    -------
    array of shape (m, d) or (T, m, d), float64, on ``gen``'s library and device
    """
    owner = "sample_projection_on"
    kind, m, d = _check_kind(kind, n_features, dim, owner)
    T = 1 if n_draws is None else check_int(n_draws, "n_draws", owner, low=1)
    hb = check_int(hd_blocks, "hd_blocks", owner, low=1)
    gen = as_backend_generator(gen)
    if not isinstance(gen, BackendGenerator):
        raise InvalidParameterError(
            f"The `gen` parameter of {owner} must be an rfkit BackendGenerator or a torch.Generator. "
            f"Got {gen!r} instead."
        )
    _check_memory(kind, T, m, d, owner)
    W = assemble_on(gen.backend, kind, device_ingredients(kind, gen, T, m, d, hb), m, d)
    return W[0] if n_draws is None else W


def _streams_per_block(kind: str, m: int, d: int) -> int:
    """Streams per block of :func:`sample_projection_streams`, from the sizes only.

    About :data:`STREAM_BLOCK` result elements; SimRFs+ blocks are 16 times larger, since each block
    runs its d x 8 Gauss-Seidel steps as separate NumPy calls whose interpreter overhead more blocks
    would repeat, on one core at a time (the GIL).
    """
    return max(1, (STREAM_BLOCK * (16 if kind == "simplex-plus" else 1)) // (m * d))


def _stream_ingredients(
    kind: str, gens: list[np.random.Generator], m: int, d: int, hb: int
) -> dict[str, np.ndarray]:
    """The random numbers of one draw per generator, stacked: ``_ingredients(kind, g, 1, ...)`` for
    each ``g``, in the same order from each stream, written straight into the stacked arrays (the
    hot path of studies: a few microseconds per stream)."""
    T = len(gens)
    if kind == "iid":
        W = np.empty((T, m, d))
        for t, g in enumerate(gens):
            g.standard_normal(out=W[t])
        return {"W": W}
    if kind in ("orthogonal", "orthogonal-fixed", "simplex", "simplex-plus"):
        sizes = _gaussian_blocks(kind, m, d)
        flat = np.empty((T, sum(sizes)))
        norms = np.empty((T, m))
        for t, g in enumerate(gens):
            g.standard_normal(out=flat[t])
            if kind != "orthogonal-fixed":
                norms[t] = g.chisquare(d, size=m)
        out = _split_blocks(flat, kind, m, d)
        if kind != "orthogonal-fixed":
            out["norms"] = np.sqrt(norms)
        return out
    if kind == "qmc":
        shape = (_sobol_log2(m) + 1, d)
        R = np.empty((T, *shape), dtype=np.int64)
        for t, g in enumerate(gens):
            R[t] = g.integers(0, 1 << _SOBOL_DIGITS, size=shape, dtype=np.int64)
        return {"R": R}
    dp = 1 << max(0, int(np.ceil(np.log2(d))))
    nb = -(-m // dp)
    bits = np.empty((T, nb, hb, dp), dtype=np.int64)
    norms = np.empty((T, m))
    for t, g in enumerate(gens):
        bits[t] = g.integers(0, 2, size=(nb, hb, dp), dtype=np.int64)  # what choice([-1, 1]) draws
        norms[t] = g.chisquare(d, size=m)
    return {"signs": np.where(bits == 1, 1.0, -1.0), "norms": np.sqrt(norms)}


def _stream_generator(r: Any) -> np.random.Generator:
    """``check_rng`` with a fast path for SeedSequence objects (same stream as default_rng)."""
    if type(r) is np.random.SeedSequence:
        return np.random.Generator(np.random.PCG64(r))
    return check_rng(r)


def _ingredients(
    kind: str, gen: np.random.Generator, T: int, m: int, d: int, hb: int
) -> dict[str, np.ndarray]:
    """The random numbers of ``T`` draws, in the order one generator produces them."""
    if kind == "iid":
        return {"W": gen.standard_normal((T, m, d))}
    if kind in ("orthogonal", "orthogonal-fixed", "simplex", "simplex-plus"):
        out = _split_blocks(gen.standard_normal((T, sum(_gaussian_blocks(kind, m, d)))), kind, m, d)
        if kind != "orthogonal-fixed":
            out["norms"] = np.sqrt(gen.chisquare(d, size=(T, m)))
        return out
    if kind == "qmc":
        # per draw: k columns of L_j (lower bits random) and the digital shift e_j, each b-bit
        return {"R": gen.integers(0, 1 << _SOBOL_DIGITS, size=(T, _sobol_log2(m) + 1, d), dtype=np.int64)}
    dp = 1 << max(0, int(np.ceil(np.log2(d))))
    nb = -(-m // dp)
    # choice([-1.0, 1.0], size) draws integers(0, 2, size, int64) and indexes: the same numbers, without
    # choice's per-call overhead
    signs = np.where(gen.integers(0, 2, size=(T, nb, hb, dp), dtype=np.int64) == 1, 1.0, -1.0)
    norms = np.sqrt(gen.chisquare(d, size=(T, m)))
    return {"signs": signs, "norms": norms}


def _gaussian_blocks(kind: str, m: int, d: int) -> tuple[int, int]:
    """Gaussians per draw of the block kinds: ``(in the d x d blocks, in the partial d x k block)``.

    One d x d block per started block of d rows, except a partial block above
    :data:`FULL_BLOCK_MAX_DIM`, which is the d x (m % d) Gaussian block of a reduced QR.
    """
    full, rest = divmod(m, d)
    if _reduced_partial(kind, m, d):
        return full * d * d, d * rest
    return -(-m // d) * d * d, 0


def _split_blocks(flat: np.ndarray, kind: str, m: int, d: int) -> dict[str, np.ndarray]:
    """``{"G": (T, nb, d, d)}`` and, for a reduced partial block, ``"P": (T, d, m % d)`` from the
    Gaussians of each draw in the order the generator gives them (blocks in row order)."""
    n_full, n_part = _gaussian_blocks(kind, m, d)
    T = flat.shape[0]
    out: dict[str, np.ndarray] = {"G": flat[:, :n_full].reshape(T, n_full // (d * d), d, d)}
    if n_part:
        out["P"] = flat[:, n_full:].reshape(T, d, n_part // d)
    return out


def _orthogonal_rows(ing: dict[str, np.ndarray], m: int, d: int) -> np.ndarray:
    """The unit rows (T, m, d): Haar rows of the d x d blocks, then those of the reduced partial block."""
    T, nb = ing["G"].shape[:2]
    rows = _haar_rows(ing["G"]).reshape(T, nb * d, d) if nb else np.empty((T, 0, d))
    if "P" in ing:
        rows = np.concatenate([rows, _haar_rows(ing["P"])], axis=1)
    return rows[:, :m]


def _assemble(kind: str, ing: dict[str, np.ndarray], m: int, d: int) -> np.ndarray:
    """Directions (T, m, d) from the random ingredients (vectorised over the batch)."""
    if kind == "iid":
        return ing["W"]
    if kind in ("orthogonal", "orthogonal-fixed"):
        rows = _orthogonal_rows(ing, m, d)
        if kind == "orthogonal-fixed":
            return rows * np.sqrt(d)
        return rows * ing["norms"][..., None]
    if kind in ("simplex", "simplex-plus"):
        H = _haar_rows(ing["G"])
        T, nb = H.shape[:2]
        if kind == "simplex":
            U = _simplex_vertices(d)
        else:
            U = _simplex_plus_directions(ing["norms"], nb, d)
        rows = U @ H  # rows R^T u_i: the block's unit directions rotated by a Haar R
        return rows.reshape(T, nb * d, d)[:, :m] * ing["norms"][..., None]
    if kind == "qmc":
        return _scrambled_sobol_normal(ing["R"], m, d)
    return _structured(ing["signs"], ing["norms"], m, d)


def _haar_rows(G: np.ndarray) -> np.ndarray:
    """Rows of Haar-distributed orthogonal matrices from Gaussian stacks ``G`` (..., d, d).

    For a d x k stack (k < d) the (reduced) QR gives the k rows of a Haar matrix: the first k
    columns of Q depend on the first k columns of G only, with the same sign fix.
    """
    Q, R = np.linalg.qr(G)
    s = np.sign(np.diagonal(R, axis1=-2, axis2=-1))
    s[s == 0] = 1.0  # probability zero; keeps Q orthogonal
    Q = Q * s[..., None, :]  # Q diag(sign R_ii): Haar (Mezzadri 2007)
    return np.swapaxes(Q, -1, -2)


def _simplex_vertices(d: int) -> np.ndarray:
    r"""Unit vertices of a regular simplex centred at 0, as the rows of a (d, d) array.

    Row ``i`` is :math:`(e_i - \mathbf 1/d)/\sqrt{1-1/d}`: unit norm, pairwise inner products
    :math:`-1/(d-1)`, spanning the hyperplane orthogonal to :math:`\mathbf 1`. ``d = 1``: ``[[1]]``.
    """
    if d == 1:
        return np.ones((1, 1))
    return (np.eye(d) - 1.0 / d) / np.sqrt(1.0 - 1.0 / d)


def _simplex_plus_directions(norms: np.ndarray, nb: int, d: int) -> np.ndarray:
    r"""SimRFs+ unit directions (T, nb, d, d) for the norms (T, m): Gauss-Seidel on :math:`\|\sum\rho_i u_i\|^2`.

    Unused rows of a partial last block get weight 0 (they do not pull on the others).
    """
    T, m = norms.shape
    rho = np.zeros((T, nb * d))
    rho[:, :m] = norms
    rho = rho.reshape(T * nb, d)
    U = np.array(np.broadcast_to(_simplex_vertices(d), (T * nb, d, d)))
    if d > 1:
        R = np.einsum("bi,bik->bk", rho, U)
        for _ in range(_SIMPLEX_PLUS_SWEEPS):
            for i in range(d):
                Ri = R - rho[:, i, None] * U[:, i]
                n = np.linalg.norm(Ri, axis=1, keepdims=True)
                ok = n[:, 0] > 0  # a zero resultant (probability 0) keeps the direction
                U[ok, i] = -Ri[ok] / n[ok]
                R = Ri + rho[:, i, None] * U[:, i]
    return U.reshape(T, nb, d, d)


def _structured(signs: np.ndarray, norms: np.ndarray, m: int, d: int) -> np.ndarray:
    T, nb, hd_blocks, dp = signs.shape
    from scipy.linalg import hadamard  # SciPy's linalg loads only when a structured draw is asked for

    H = hadamard(dp).astype(np.float64) / np.sqrt(dp)
    M = H * signs[:, :, 0, None, :]
    for k in range(1, hd_blocks):
        M = M @ (H * signs[:, :, k, None, :])
    rows = M[..., :d].reshape(T, nb * dp, d)[:, :m]
    lengths = np.linalg.norm(rows, axis=-1, keepdims=True)
    if np.any(lengths == 0):
        raise NumericalOverflowError(
            "A structured direction vanished on the first d coordinates; draw again."
        )
    return rows / lengths * norms[..., None]
