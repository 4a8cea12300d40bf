"""The protocol checks at realistic size: hundreds of rows at a study's norms, streams, dtypes, backends."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import InvalidParameterError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "studies" / "examples"))
from rescaled import RescaledPositive, RescaledPositiveDraw  # noqa: E402

F, A = rk.features, rk.attention


class _BreaksAtLargeNorms(RescaledPositive):
    """Fine on the small probe (norms ~0.5); NaN features for rows of norm > 2."""

    def sample_one(self, dim: int, *, rng: np.random.Generator) -> Any:
        return _NaNDraw(self, dim, rng.standard_normal((self.n_features, dim)))


class _NaNDraw(RescaledPositiveDraw):
    def _log_features(self, X: np.ndarray, side: str) -> tuple[None, np.ndarray]:
        _, lf = super()._log_features(X, side)
        big = np.linalg.norm(X, axis=-1, keepdims=True) > 2
        return None, np.where(big, np.nan, lf)


class _BreaksInFloat32(RescaledPositive):
    def sample_one(self, dim: int, *, rng: np.random.Generator) -> Any:
        return _F32Draw(self, dim, rng.standard_normal((self.n_features, dim)))


class _F32Draw(RescaledPositiveDraw):
    def _log_features(self, X: np.ndarray, side: str) -> tuple[None, np.ndarray]:
        _, lf = super()._log_features(X, side)
        return None, lf + (np.inf if X.dtype == np.float32 else 0.0)


def test_feature_check_catches_a_map_that_breaks_only_at_a_studys_norms() -> None:
    F.check_feature_map(_BreaksAtLargeNorms(8), dim=4, norms=[0.1, 1.0])  # within its range: fine
    with pytest.raises(InvalidParameterError, match="256 rows at norms up to 3") as info:
        F.check_feature_map(_BreaksAtLargeNorms(8), dim=4)
    assert "finite" in str(info.value)


def test_feature_check_probes_float32() -> None:
    with pytest.raises(InvalidParameterError, match="float32"):
        F.check_feature_map(_BreaksInFloat32(8), dim=4)


def test_feature_check_probes_array_api_strict_on_request() -> None:
    pytest.importorskip("array_api_strict")
    F.check_feature_map(RescaledPositive(8), dim=4)  # a NumPy-only map of your own: not by default
    with pytest.raises(InvalidParameterError, match="array_api_strict"):
        F.check_feature_map(RescaledPositive(8), dim=4, array_api=True)


@pytest.mark.parametrize("norms", [[], [0.0], [-1.0], [float("nan")], "big", [True]])
def test_feature_check_norms_are_checked(norms: Any) -> None:
    with pytest.raises(InvalidParameterError, match="`norms`"):
        F.check_feature_map(F.Positive(4), dim=3, norms=norms)


def test_feature_check_n_rows_is_checked() -> None:
    with pytest.raises(InvalidParameterError, match="`n_rows`"):
        F.check_feature_map(F.Positive(4), dim=3, n_rows=0)


@pytest.mark.parametrize(
    "fm", [F.Positive(64), F.Trig(64), F.Taylor(2), F.TensorSketch(64, degree=2)], ids=str
)
def test_feature_check_is_fast_for_builtin_maps(fm: Any) -> None:
    F.check_feature_map(fm, dim=16)  # warm caches
    best = min(_timed(lambda: F.check_feature_map(fm, dim=16)) for _ in range(3))
    assert best < 1.0, best  # about 0.15 s or less on an idle core; generous for shared CI machines


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# --------------------------------------------------------------------------- attention


def _exact(Q: Any, K: Any, V: Any, *, rng: Any = None) -> Any:
    return A.AttentionResult(output=A.softmax(Q, K, V), method="exact")


def _nan_at_large_norms(Q: Any, K: Any, V: Any, *, rng: Any = None) -> Any:
    out = A.softmax(Q, K, V)
    out[np.linalg.norm(Q, axis=-1) > 2] = np.nan  # not counted in n_nonpositive
    return A.AttentionResult(output=out, method="broken")


def _ignores_rng(Q: Any, K: Any, V: Any, *, rng: Any = None) -> Any:
    return A.RFA(F.Positive(8))(Q, K, V, rng=0)


def _wrong_shape_at_scale(Q: Any, K: Any, V: Any, *, rng: Any = None) -> Any:
    out = A.softmax(Q, K, V)
    return A.AttentionResult(output=out[:8] if Q.shape[0] > 8 else out, method="broken")


@pytest.mark.parametrize(
    "est",
    [
        A.RFA(F.Positive(16)),
        A.RFA(F.Trig(16)),  # NaN rows at norm 3, counted in n_nonpositive: allowed
        A.RFA(F.Taylor(2), causal=True),
        A.RA(8),
        A.SNIS(n_samples=16),
        A.LARA(n_proposals=2),
        _exact,
    ],
    ids=lambda e: getattr(e, "__name__", type(e).__name__),
)
def test_builtin_estimators_pass(est: Any) -> None:
    A.check_attention_estimator(est, dim=8)


def test_attention_check_catches_nan_rows_at_large_norms() -> None:
    A.check_attention_estimator(_nan_at_large_norms, dim=8, norms=[0.5, 1.0])
    with pytest.raises(InvalidParameterError, match="finite .* n_nonpositive"):
        A.check_attention_estimator(_nan_at_large_norms, dim=8)


def test_attention_check_catches_identical_streams_when_random() -> None:
    A.check_attention_estimator(_ignores_rng, dim=8)  # a plain callable: not known to be random
    with pytest.raises(InvalidParameterError, match="different streams"):
        A.check_attention_estimator(_ignores_rng, dim=8, random=True)


def test_attention_check_catches_a_wrong_shape_at_scale() -> None:
    with pytest.raises(InvalidParameterError, match=r"shape of exact attention \(256, 4\)"):
        A.check_attention_estimator(_wrong_shape_at_scale, dim=8)


def test_attention_check_probes_the_causal_variant() -> None:
    class _NoCausal(A.RFA):  # type: ignore[misc]
        def __call__(self, Q: Any, K: Any, V: Any, **kw: Any) -> Any:
            if self.causal:
                raise RuntimeError("no causal form")
            return super().__call__(Q, K, V, **kw)

    with pytest.raises(InvalidParameterError, match="causal=True"):
        A.check_attention_estimator(_NoCausal(F.Positive(8)), dim=4)


def test_attention_check_arguments() -> None:
    with pytest.raises(InvalidParameterError, match="callable"):
        A.check_attention_estimator("RFA", dim=3)
    with pytest.raises(InvalidParameterError, match="`dim`"):
        A.check_attention_estimator(_exact, dim=0)
    with pytest.raises(InvalidParameterError, match="`norms`"):
        A.check_attention_estimator(_exact, dim=3, norms=[-1])
    with pytest.raises(InvalidParameterError, match="`n_rows`"):
        A.check_attention_estimator(_exact, dim=3, n_rows=1)


def test_attention_check_is_fast_for_rfa() -> None:
    est = A.RFA(F.Positive(64))
    A.check_attention_estimator(est, dim=16)
    best = min(_timed(lambda: A.check_attention_estimator(est, dim=16)) for _ in range(3))
    assert best < 1.0, best  # about 0.15 s or less on an idle core; generous for shared CI machines
