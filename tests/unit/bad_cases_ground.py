"""Bad and unlucky inputs below the study layer: arrays, devices, memory, theory, bounds, caches, checks.

Collected by test_bad_inputs.py. Every case here failed on the code before these checks existed
(a raw traceback, a silent wrong number or a misleading message) except those marked
``# kept:``, which were already right and stay pinned.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bad_input_kit import Bad, Cli, Good

import rfkit as rk
from rfkit._backend import backend_for
from rfkit._params import MAX_BYTES_ENV, max_bytes
from rfkit.exceptions import (
    BackendError,
    DamagedCacheWarning,
    InvalidParameterError,
    MemoryLimitError,
    NonFiniteInputError,
    NumericalOverflowError,
    ShapeError,
)

F, A, T, B, D = rk.features, rk.attention, rk.theory, rk.theory.bounds, rk.data
K = rk.kernels
_R = np.random.default_rng(20260211)
X = 0.3 * _R.normal(size=(5, 3))
Y = 0.3 * _R.normal(size=(4, 3))
V = _R.normal(size=(4, 2))
Q6, K7, V7 = 0.3 * _R.normal(size=(6, 3)), 0.3 * _R.normal(size=(7, 3)), _R.normal(size=(7, 2))
I2 = np.eye(2)
DRAW = F.Positive(8).sample(3, rng=0)


def _srm(**kw: Any) -> Any:
    """rk.theory.sampled_remainder_moments of one query (X[0]) over keys Y, values V, the first key exact."""
    return T.sampled_remainder_moments(X[0], Y, V, np.arange(4) < 1, **kw)


def _masked(a: np.ndarray) -> np.ma.MaskedArray:
    return np.ma.masked_array(a, mask=a > 0.2)


def _matrix(a: np.ndarray) -> Any:
    with warnings.catch_warnings():  # np.matrix warns on creation (PendingDeprecationWarning)
        warnings.simplefilter("ignore")
        return np.matrix(a)


@contextlib.contextmanager
def _limit(value: str) -> Iterator[None]:
    old = os.environ.get(MAX_BYTES_ENV)
    os.environ[MAX_BYTES_ENV] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[MAX_BYTES_ENV]
        else:
            os.environ[MAX_BYTES_ENV] = old


def _limited(fn: Callable[[], Any], value: str = "1G") -> Any:
    with _limit(value):
        return fn()


def _torch_device(device: str) -> Any:
    pytest.importorskip("torch")
    return backend_for("torch", device)


def _cuda_missing() -> Any:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    return backend_for("torch", "cuda")


class _NaNAtLargeNorms(F.Positive):
    """A map of one's own that gives NaN features for rows of norm > 2 (the small probe misses it)."""

    def sample_one(self, dim: int, *, rng: np.random.Generator) -> Any:
        return _NaNDraw(F.Positive(self.n_features).sample(dim, rng=rng))


class _NaNDraw(F.FeatureDraw):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner.spec, inner.dim)
        self.inner = inner

    def _log_features(self, X: Any, side: str) -> tuple[Any, Any]:
        sign, lf = self.inner.log_features(X, side)
        return sign, np.where(np.linalg.norm(X, axis=-1, keepdims=True) > 2, np.nan, lf)


def _nan_rows_uncounted(Q: Any, K: Any, V: Any, *, rng: Any = None) -> Any:
    out = A.softmax(Q, K, V)
    out[np.linalg.norm(Q, axis=-1) > 2] = np.nan
    return A.AttentionResult(output=out, method="mine")


def _complex_npy(tmp: Path) -> str:
    path = tmp / "mean.npy"
    np.save(path, np.array([1.0 + 2.0j, 0.0]))
    return str(path)


_CHI2 = "--cov-x 1 --cov-y 1 -s 4 --p 0.5 -m 8".split()

CASES: list[Bad] = [
    # ------------------------------------------------------------------ masked arrays: refused (mask would be lost)
    Bad(
        "softmax_kernel-masked-X",
        lambda t: K.softmax_kernel(_masked(X), Y),
        InvalidParameterError,
        "`X`",
        "masked",
    ),
    Bad(
        "softmax_kernel-masked-Y",
        lambda t: K.softmax_kernel(X, _masked(Y)),
        InvalidParameterError,
        "`Y`",
        "masked",
    ),
    Bad(
        "log_softmax_kernel-masked",
        lambda t: K.log_softmax_kernel(_masked(X), Y),
        InvalidParameterError,
        "`X`",
        "MaskedArray",
    ),
    Bad(
        "gaussian_kernel-masked",
        lambda t: K.gaussian_kernel(X, _masked(Y)),
        InvalidParameterError,
        "`Y`",
        "MaskedArray",
    ),
    Bad(
        "softmax-masked-Q",
        lambda t: A.softmax(_masked(X), Y, V),
        InvalidParameterError,
        "`Q`",
        "key_padding_mask=",
    ),
    Bad(
        "softmax-masked-K",
        lambda t: A.softmax(X, _masked(Y), V),
        InvalidParameterError,
        "`K`",
        "key_padding_mask=",
    ),
    Bad("softmax-masked-V", lambda t: A.softmax(X, Y, _masked(V)), InvalidParameterError, "`V`", "masked"),
    Bad(
        "RFA-masked-K",
        lambda t: A.RFA(F.Positive(8))(X, _masked(Y), V, rng=0),
        InvalidParameterError,
        "`K`",
        "masked",
    ),
    Bad("RA-masked-Q", lambda t: A.RA(4)(_masked(X), Y, V, rng=0), InvalidParameterError, "`Q`", "masked"),
    Bad("draw.queries-masked", lambda t: DRAW.queries(_masked(X)), InvalidParameterError, "`X`", "masked"),
    Bad("draw.kernel-masked", lambda t: DRAW.kernel(X, _masked(Y)), InvalidParameterError, "`Y`", "masked"),
    Bad(
        "theory.mse-masked",
        lambda t: T.mse(F.Positive(8), _masked(X), X),
        InvalidParameterError,
        "masked",
        "MaskedArray",
    ),
    Bad("adaptive_A-masked", lambda t: F.adaptive_A(_masked(X), Y), InvalidParameterError, "`Q`", "masked"),
    Bad("describe-masked", lambda t: D.describe(_masked(X), Y), InvalidParameterError, "`q`", "masked"),
    Bad(
        "hotelling_concentration-masked",
        lambda t: B.hotelling_concentration(
            _masked(_R.normal(size=(9, 2))), _R.normal(size=(9, 2)), None, 0.5, 8
        ),
        InvalidParameterError,
        "`X`",
        "masked",
    ),
    # ------------------------------------------------------------------ complex inputs: refused everywhere
    Bad(
        "gaussian_qk-mean-complex",
        lambda t: D.gaussian_qk(3, 2, mean_q=1j),
        InvalidParameterError,
        "`mean_q`",
        "1j",
    ),
    Bad(
        "gaussian_qk-cov-complex",
        lambda t: D.gaussian_qk(3, 2, cov_k=np.eye(2) + 0j),
        InvalidParameterError,
        "`cov_k`",
        "complex128",
    ),
    Bad(
        "gaussian_qk-mean-text",
        lambda t: D.gaussian_qk(3, 2, mean_q="zero"),
        InvalidParameterError,
        "`mean_q`",
        "'zero'",
    ),
    Bad(
        "attention_error_bound-complex",
        lambda t: T.attention_error_bound(0.1 + 0j),
        InvalidParameterError,
        "`eps`",
        "complex128",
    ),
    Bad(
        "attention_error_bound-vmax-complex",
        lambda t: T.attention_error_bound(0.1, 1j),
        InvalidParameterError,
        "`v_max`",
        "1j",
    ),
    # kept: these were refused already and stay pinned
    Bad(
        "gaussian_kernel-complex-Y",
        lambda t: K.gaussian_kernel(X, Y + 1j),
        InvalidParameterError,
        "`Y`",
        "complex128",
    ),
    Bad("softmax-complex-V", lambda t: A.softmax(X, Y, V + 0j), InvalidParameterError, "`V`", "complex128"),
    Bad(
        "chi2_concentration-complex",
        lambda t: B.chi2_concentration(np.array([1j, 0]), I2, np.zeros(2), I2, None, 4, 0.5, 8),
        InvalidParameterError,
        "`mean_x`",
        "complex128",
    ),
    Bad(
        "max_relative_error-complex",
        lambda t: B.max_relative_error(1 + 1j, 8),
        InvalidParameterError,
        "`r`",
        "1j",
    ),
    Bad("draw.queries-complex", lambda t: DRAW.queries(X + 1j), InvalidParameterError, "`X`", "complex128"),
    # ------------------------------------------------------------------ devices: named, with what is available
    Bad(
        "backend_for-torch-bogus",
        lambda t: _torch_device("bogus"),
        BackendError,
        "`device` 'bogus'",
        "Available: torch",
    ),
    Bad(
        "backend_for-torch-meta",
        lambda t: _torch_device("meta"),
        BackendError,
        "`device` 'meta'",
        "Available: torch",
    ),
    Bad(
        "backend_for-torch-cuda", lambda t: _cuda_missing(), BackendError, "`device` 'cuda'", "no CUDA device"
    ),
    Bad(
        "backend_for-torch-cuda-index",
        lambda t: _torch_device("cuda:7") if not _no_torch() else None,
        BackendError,
        "`device` 'cuda:7'",
        "Available: torch",
    ),
    Bad(
        "backend_for-strict-bogus",
        lambda t: backend_for("array_api_strict", "bogus"),
        BackendError,
        "`device` 'bogus'",
        "Available: array_api_strict",
    ),
    # ------------------------------------------------------------------ memory: estimated first, refused with the estimate
    Bad(
        "Positive-sample-1e9",
        lambda t: _limited(lambda: F.Positive(10**9).sample(3, rng=0)),
        MemoryLimitError,
        "n_features=1000000000",
        "GiB",
    ),
    Bad(
        "Positive-sample-1e12",
        lambda t: F.Positive(10**12).sample(3, rng=0),
        MemoryLimitError,
        "n_features=1000000000000",
        "TiB",
    ),
    Bad(
        "Positive-sample_streams-huge",
        lambda t: _limited(lambda: F.Positive(10**8).sample_streams(64, [1, 2])),
        MemoryLimitError,
        "T=2",
        "RFKIT_MAX_BYTES",
    ),
    Bad(
        "Trig-sample-huge",
        lambda t: _limited(lambda: F.Trig(10**9, projection="iid").sample(8, rng=0)),
        MemoryLimitError,
        "n_features=1000000000",
        "GiB",
    ),
    Bad(
        "Positive-n_draws-huge",
        lambda t: _limited(lambda: F.Positive(64).sample(64, rng=0, n_draws=10**6)),
        MemoryLimitError,
        "T=1000000",
        "GiB",
    ),
    Bad(
        "sample_projection-huge",
        lambda t: _limited(lambda: rk.projections.sample_projection("orthogonal", 10**9, 4, rng=0)),
        MemoryLimitError,
        "sample_projection",
        "GiB",
    ),
    Bad(
        "softmax_kernel-huge",
        lambda t: _limited(lambda: K.softmax_kernel(np.zeros((10**5, 1)), np.zeros((10**5, 1)))),
        MemoryLimitError,
        "softmax_kernel",
        "(2, 100000, 100000)",
    ),
    Bad(
        "gaussian_kernel-huge",
        lambda t: _limited(lambda: K.gaussian_kernel(np.zeros((10**5, 1)), np.zeros((10**5, 1)))),
        MemoryLimitError,
        "gaussian_kernel",
        "GiB",
    ),
    Bad(
        "draw.kernel-huge",
        lambda t: _limited(lambda: DRAW.kernel(np.zeros((10**5, 3)), np.zeros((10**5, 3)))),
        MemoryLimitError,
        "Positive draw",
        "(2, 100000, 100000)",
    ),
    Bad(
        "draw.queries-huge",
        lambda t: _limited(lambda: F.Positive(10**4).sample(3, rng=0).queries(np.zeros((10**5, 3))), "100M"),
        MemoryLimitError,
        "Positive draw",
        "features",
    ),
    Bad(
        "softmax-chunk-huge",
        lambda t: _limited(
            lambda: A.softmax(
                np.zeros((10**5, 1)), np.zeros((10**5, 1)), np.zeros((10**5, 1)), chunk_size=10**5
            )
        ),
        MemoryLimitError,
        "softmax",
        "chunk_size",
    ),
    Bad(
        "RFA-n_draws-huge",
        lambda t: _limited(lambda: A.RFA(F.Positive(4))(X, Y, V, rng=0, n_draws=10**8)),
        MemoryLimitError,
        "RFA",
        "(T, batch, n, dv)",
    ),
    Bad(
        "pairs_with_norms-huge",
        lambda t: D.pairs_with_norms(10**12, 64),
        MemoryLimitError,
        "pairs_with_norms",
        "PiB",
    ),
    Bad("gaussian_qk-huge", lambda t: D.gaussian_qk(10**12, 64), MemoryLimitError, "gaussian_qk", "TiB"),
    Bad("hard_qk-huge", lambda t: D.hard_qk(10**9, 10**4), MemoryLimitError, "hard_qk", "TiB"),
    Bad("sequence_qkv-huge", lambda t: D.sequence_qkv(10**9, 10**4), MemoryLimitError, "sequence_qkv", "TiB"),
    Bad(
        "kernel_benchmark_pairs-huge",
        lambda t: D.kernel_benchmark_pairs("norm-0.5", 10**12),
        MemoryLimitError,
        "n_pairs",
        "TiB",
    ),
    Bad(
        "RFKIT_MAX_BYTES-text",
        lambda t: _limited(max_bytes, "lots"),
        InvalidParameterError,
        "`RFKIT_MAX_BYTES`",
        "'lots'",
    ),
    Bad(
        "RFKIT_MAX_BYTES-negative",
        lambda t: _limited(max_bytes, "-5G"),
        InvalidParameterError,
        "`RFKIT_MAX_BYTES`",
        "'-5G'",
    ),
    Bad(
        "theory.check-n_trials-huge",
        lambda t: T.check(F.Positive(4), X, X, n_trials=10**15, rng=0),
        InvalidParameterError,
        "n_trials=1000000000000000",
        "limit",
    ),
    # ------------------------------------------------------------------ theory and bounds: the right argument, no stray warning
    Bad("ra_mse-nan-0d", lambda t: T.ra_mse(float("nan"), 4), NonFiniteInputError, "`variance_f`", "NaN"),
    Bad(
        "ra_mse-n_samples-0-in-array",
        lambda t: T.ra_mse([0.1, 0.2], [4, 0]),
        InvalidParameterError,
        "`n_samples`",
        "[4, 0]",
    ),
    Bad("ra_mse-n_samples-float", lambda t: T.ra_mse(0.1, 2.5), InvalidParameterError, "`n_samples`", "2.5"),
    Bad("ra_mse-n_samples-bool", lambda t: T.ra_mse(0.1, True), InvalidParameterError, "`n_samples`", "True"),
    Bad(
        "ra_mse-nan-np0d",
        lambda t: T.ra_mse(np.float64("nan"), np.int64(4)),
        NonFiniteInputError,
        "`variance_f`",
        "NaN",
    ),
    Bad(
        "ra_mse-inf-0d",
        lambda t: T.ra_mse(np.array(np.inf), 4),
        NonFiniteInputError,
        "`variance_f`",
        "infinity",
    ),
    Bad(
        "chi2_concentration-cov-names-mean",
        lambda t: B.chi2_concentration(np.zeros(2), I2, np.zeros(3), I2, None, 4, 0.5, 8),
        ShapeError,
        "`cov_y`",
        "to match `mean_y` (d=3)",
    ),
    # kept: consistent pairs with different dimensions name the two means
    Bad(
        "chi2_concentration-means",
        lambda t: B.chi2_concentration(np.zeros(2), I2, np.zeros(3), np.eye(3), None, 4, 0.5, 8),
        ShapeError,
        "`mean_x` and `mean_y`",
        "2 != 3",
    ),
    Bad(
        "chi2_concentration-overflow-mean",
        lambda t: B.chi2_concentration(np.array([1e200, 0.0]), I2, np.zeros(2), I2, None, 4, 0.5, 8),
        NumericalOverflowError,
        "chi2_concentration",
        "overflow float64",
    ),
    Bad(
        "chi2_concentration-overflow-A",
        lambda t: B.chi2_concentration(np.zeros(2), I2, np.zeros(2), I2, 1e200 * I2, 4, 0.5, 8),
        NumericalOverflowError,
        "`A`",
        "overflow float64",
    ),
    Bad(
        "hotelling_concentration-overflow",
        lambda t: B.hotelling_concentration(
            1e200 * _R.normal(size=(9, 2)), _R.normal(size=(9, 2)), None, 0.5, 8
        ),
        NumericalOverflowError,
        "`X`",
        "overflows float64",
    ),
    Bad(
        "hotelling_concentration-overflow-A",
        lambda t: B.hotelling_concentration(
            _R.normal(size=(9, 2)), _R.normal(size=(9, 2)), np.array([1e200, 1e200]), 0.5, 8
        ),
        NumericalOverflowError,
        "hotelling_concentration",
        "overflow float64",
    ),
    # ------------------------------------------------------------------ protocol checks at realistic size
    Bad(
        "check_feature_map-large-norms",
        lambda t: F.check_feature_map(_NaNAtLargeNorms(8), dim=4),
        InvalidParameterError,
        "_NaNAtLargeNorms",
        "NaN or inf",
    ),
    Bad(
        "check_feature_map-norms",
        lambda t: F.check_feature_map(F.Positive(4), dim=3, norms=[-1.0]),
        InvalidParameterError,
        "`norms`",
        "[-1.0]",
    ),
    Bad(
        "check_feature_map-n_rows",
        lambda t: F.check_feature_map(F.Positive(4), dim=3, n_rows=0),
        InvalidParameterError,
        "`n_rows`",
        "Got 0",
    ),
    Bad(
        "check_attention_estimator-nan-rows",
        lambda t: A.check_attention_estimator(_nan_rows_uncounted, dim=4),
        InvalidParameterError,
        "n_nonpositive",
        "non-finite rows",
    ),
    Bad(
        "check_attention_estimator-dim",
        lambda t: A.check_attention_estimator(A.RFA(F.Positive(4)), dim=0),
        InvalidParameterError,
        "`dim`",
        "Got 0",
    ),
    Bad(
        "check_attention_estimator-callable",
        lambda t: A.check_attention_estimator("RFA", dim=3),
        InvalidParameterError,
        "callable",
        "'RFA'",
    ),
    # ------------------------------------------------------------------ neighbours: 0-d, object, boolean, int, empty (kept)
    Bad("softmax_kernel-0d", lambda t: K.softmax_kernel(np.float64(1.0), Y), ShapeError, "`X`", "shape ()"),
    Bad(
        "softmax_kernel-object",
        lambda t: K.softmax_kernel(np.array([[0.1, 0.2, 0.3]], dtype=object), Y),
        InvalidParameterError,
        "`X`",
        "object",
    ),
    # sampled remainders of sparse attention: one query X[0], keys Y, values V, the first key exact
    Bad(
        "srm-remainder-features",
        lambda t: _srm(remainder="features"),
        InvalidParameterError,
        "`remainder`",
        "'features'",
    ),
    Bad("srm-n_samples-missing", lambda t: _srm(), InvalidParameterError, "`n_samples`", "None"),
    Bad("srm-n_samples-zero", lambda t: _srm(n_samples=0), InvalidParameterError, "`n_samples`", "0"),
    Bad(
        "srm-importance-without-replacement",
        lambda t: _srm(remainder="importance", n_samples=2, replace=False),
        InvalidParameterError,
        "`replace`",
        "False",
    ),
    Bad(
        "srm-stratified-with-replacement",
        lambda t: _srm(remainder="stratified", n_samples=2, replace=True),
        InvalidParameterError,
        "`replace`",
        "True",
    ),
    Bad(
        "srm-proposal-zero",
        lambda t: _srm(remainder="importance", n_samples=2, proposal=[1.0, 1.0, 0.0, 1.0]),
        InvalidParameterError,
        "`proposal`",
        "0.0",
    ),
    Bad(
        "srm-proposal-shape",
        lambda t: _srm(remainder="importance", n_samples=2, proposal=[1.0, 1.0, 1.0]),
        ShapeError,
        "`proposal`",
        "(3,)",
    ),
    Bad(
        "srm-proposal-not-importance",
        lambda t: _srm(n_samples=2, proposal=np.ones(4)),
        InvalidParameterError,
        "`proposal`",
        "'uniform'",
    ),
    Bad(
        "srm-mix-above-1",
        lambda t: _srm(remainder="importance", n_samples=2, mix=1.5),
        InvalidParameterError,
        "`mix`",
        "1.5",
    ),
    Bad(
        "srm-none-empty-support",
        lambda t: T.sampled_remainder_moments(X[0], Y, V, np.zeros(4, bool), remainder="none"),
        InvalidParameterError,
        "`exact`",
        "empty support",
    ),
    Bad(
        "srm-exact-int",
        lambda t: T.sampled_remainder_moments(X[0], Y, V, np.ones(4, int), n_samples=2),
        InvalidParameterError,
        "`exact`",
        "int64",
    ),
    Bad("softmax_kernel-bool", lambda t: K.softmax_kernel(X > 0, Y), InvalidParameterError, "`X`", "bool"),
    Bad(
        "softmax_kernel-int-large",
        lambda t: K.softmax_kernel(np.full((2, 3), 10**12), Y),
        InvalidParameterError,
        "`X`",
        "int64",
    ),
    Bad(
        "softmax-empty-K",
        lambda t: A.softmax(X, np.zeros((0, 3)), np.zeros((0, 2))),
        ShapeError,
        "empty input",
        "(0, 3)",
    ),
]


def _no_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("PyTorch is not installed")
    return False


CLI_CASES: list[Cli] = [
    Cli(
        "bound-chi2-means",
        lambda t: ["bound", "chi2", "--mean-x", "[0,0]", "--mean-y", "[0,0,0]", *_CHI2],
        2,
        "`mean_x` and `mean_y`",
        "2 != 3",
    ),
    Cli(
        "bound-chi2-overflow",
        lambda t: ["bound", "chi2", "--mean-x", "[1e200,0]", "--mean-y", "[0,0]", *_CHI2],
        2,
        "chi2_concentration",
        "overflow float64",
    ),
    Cli(
        "bound-chi2-complex-npy",
        lambda t: ["bound", "chi2", "--mean-x", _complex_npy(t), "--mean-y", "[0,0]", *_CHI2],
        2,
        "--mean-x",
        "complex128",
    ),
]


# ---------------------------------------------------------------------- unlucky legal inputs: right or flagged
def _close(a: Any, b: Any) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=0)


def _matrix_kernel(tmp: Path) -> None:  # kept: np.matrix already worked here (not in softmax, draws, RFA)
    _close(K.softmax_kernel(_matrix(X), _matrix(Y)), K.softmax_kernel(X, Y))


def _matrix_softmax(tmp: Path) -> None:
    _close(A.softmax(_matrix(X), _matrix(Y), _matrix(V)), A.softmax(X, Y, V))


def _matrix_draw(tmp: Path) -> None:
    _close(DRAW.kernel(_matrix(X), Y), DRAW.kernel(X, Y))
    _close(DRAW.pairwise(_matrix(X[:4]), _matrix(Y)), DRAW.pairwise(X[:4], Y))


def _matrix_rfa(tmp: Path) -> None:
    _close(
        A.RFA(F.Positive(8))(_matrix(X), Y, _matrix(V), rng=3).output,
        A.RFA(F.Positive(8))(X, Y, V, rng=3).output,
    )


def _matrix_theory(tmp: Path) -> None:
    _close(T.mse(F.Positive(8), _matrix(X[:4]), Y), T.mse(F.Positive(8), X[:4], Y))


def _taylor_message(tmp: Path) -> None:
    with pytest.raises(InvalidParameterError) as info:
        F.Taylor(30).sample(64, rng=0)
    assert "form='symmetric'" in str(info.value) and "use form='symmetric'" not in str(info.value)
    with pytest.raises(InvalidParameterError, match="use form='symmetric'"):
        F.Taylor(30, form="full").sample(64, rng=0)


def _chi2_no_warning(tmp: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stray RuntimeWarning would raise here
        with pytest.raises(NumericalOverflowError):
            B.chi2_concentration(np.array([1e300, 0.0]), I2, np.array([1e300, 0.0]), I2, None, 4, 0.5, 8)


def _limit_can_be_raised(tmp: Path) -> None:
    with _limit("1K"), pytest.raises(MemoryLimitError):
        F.Positive(1024).sample(3, rng=0)
    with _limit("64M"):
        assert F.Positive(1024).sample(3, rng=0).dim == 3


def _lists_of_lists(tmp: Path) -> None:  # kept: plain Python data joins the call's backend
    _close(K.softmax_kernel(X.tolist(), Y.tolist()), K.softmax_kernel(X, Y))


def _mixed_dtypes(tmp: Path) -> None:  # kept: the common float dtype, float64
    out = K.softmax_kernel(X.astype(np.float32), Y)
    assert out.dtype == np.float64
    _close(out, K.softmax_kernel(X.astype(np.float32).astype(np.float64), Y))


def _empty_rows(tmp: Path) -> None:  # kept: no rows give an empty kernel, not an error
    assert K.softmax_kernel(np.zeros((0, 3)), Y).shape == (0, 4)


def _damaged_cache(tmp: Path) -> None:
    first = D.minilm_qk("Call me Ishmael.", layers=0, heads=[0], cache=tmp)
    (path,) = tmp.glob("*.npz")
    path.write_bytes(path.read_bytes()[:100])  # truncated
    with pytest.warns(DamagedCacheWarning, match=path.name):
        again = D.minilm_qk("Call me Ishmael.", layers=0, heads=[0], cache=tmp)
    np.testing.assert_array_equal(again.q, first.q)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["q"] = np.full_like(arrays["q"], np.nan)  # contents replaced
    np.savez(path, **arrays)
    with pytest.warns(DamagedCacheWarning, match=path.name):
        third = D.minilm_qk("Call me Ishmael.", layers=0, heads=[0], cache=tmp)
    np.testing.assert_array_equal(third.q, first.q)


def _trig_rfa_nan_rows_pass_when_counted(tmp: Path) -> None:
    A.check_attention_estimator(A.RFA(F.Trig(16)), dim=8)  # NaN rows at norm 3, each counted


RESULT_CASES: list[Good] = [
    Good("softmax_kernel-matrix", _matrix_kernel),
    Good("softmax-matrix", _matrix_softmax),
    Good("draw.kernel-matrix", _matrix_draw),
    Good("RFA-matrix", _matrix_rfa),
    Good("theory.mse-matrix", _matrix_theory),
    Good("Taylor-size-message", _taylor_message),
    Good("chi2_concentration-no-warning", _chi2_no_warning),
    Good("RFKIT_MAX_BYTES-raise", _limit_can_be_raised),
    Good("softmax_kernel-lists", _lists_of_lists),
    Good("softmax_kernel-mixed-dtypes", _mixed_dtypes),
    Good("softmax_kernel-empty-rows", _empty_rows),
    Good("minilm_qk-damaged-cache", _damaged_cache),
    Good("check_attention_estimator-counted-nan", _trig_rfa_nan_rows_pass_when_counted),
]
