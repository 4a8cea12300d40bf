"""Hybrid's (epsilon, delta) budget on every backend the sampled remainders run on: torch (float64
and float32) and array_api_strict against NumPy for the same rng: the same uniforms, so the same
sample count per query and draw, and outputs equal to round-off (docs page *Attention
estimators*, section "Hybrid: keys by content, sampled remainders")."""

from __future__ import annotations

import numpy as np
import pytest
from backend_marks import needs_torch, torch

import rfkit as rk
from rfkit._backend import to_numpy

H = rk.attention.Hybrid
B0 = 4  # base sample


def _inputs(seed=0, n=48, d=6, dv=3, scale=0.7, masked=False):
    rng = np.random.default_rng(seed)
    Q = scale * rng.normal(size=(2, n, d))
    K = scale * rng.normal(size=(2, n, d))
    V = 1.0 + rng.normal(size=(2, n, dv))
    mask = None
    if masked:
        mask = np.zeros((2, n), dtype=bool)
        mask[0, -5:] = True
        mask[1, 7] = True
    return Q, K, V, mask


def _budget(causal, **kw):
    kw = {"window": 2, "n_global": 1, "epsilon": 0.3, "delta": 0.1, **kw}
    return H(remainder="uniform", base_samples=B0, causal=causal, **kw)


def _compare(est, conv, dtype, masked, rtol, atol, T=3):
    Q, K, V, mask = _inputs(masked=masked)
    Q, K, V = (a.astype(dtype) for a in (Q, K, V))
    ref = est(Q, K, V, rng=5, n_draws=T, key_padding_mask=mask)
    got = est(*(conv(a) for a in (Q, K, V)), rng=5, n_draws=T, key_padding_mask=conv(mask))
    counts = to_numpy(got.cost.exact_logits)
    np.testing.assert_array_equal(counts, ref.cost.exact_logits)  # the same count per query and draw
    assert to_numpy(got.output).dtype == dtype
    for a, b in (
        (got.output, ref.output),
        (got.log_scale, ref.log_scale),
        (got.denominator_values, ref.denominator_values),
        (got.numerator_values, ref.numerator_values),
    ):
        np.testing.assert_allclose(to_numpy(a), b, rtol=rtol, atol=atol)
    return ref


def _chosen(est, ref, masked):
    """Sampled counts strictly between the base sample and the whole remainder (the rule decided)."""
    Q, K, V, mask = _inputs(masked=masked)
    none = H(remainder="none", window=est.window, n_global=est.n_global, causal=est.causal)
    support = none(Q, K, V, key_padding_mask=mask).cost.exact_logits
    keep = np.ones(Q.shape[:2], bool) if mask is None else ~mask
    visible = np.cumsum(keep, axis=-1) if est.causal else keep.sum(-1, keepdims=True)
    s = ref.cost.exact_logits - support
    n_r = visible - support
    return (s > B0) & (s < n_r)


def _torch(a):
    return None if a is None else torch.asarray(a)


@needs_torch
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_torch_gives_numpys_counts_and_outputs(dtype, causal, masked):
    est = _budget(causal)
    tol = (1e-10, 1e-13) if dtype == np.float64 else (2e-5, 1e-6)
    ref = _compare(est, _torch, dtype, masked, *tol)
    assert _chosen(est, ref, masked).sum() >= 20  # the counts are the rule's, not only its clip


@needs_torch
@pytest.mark.parametrize(
    "kw",
    [
        {"budget_rule": "t"},
        {"budget_rule": "upper", "max_samples": 12},
        {"window": None, "n_global": 0},  # no support at all
        {"top_k": 3, "scorer": "quest", "block_size": 4, "epsilon": 0.2},
    ],
    ids=["t", "upper-capped", "no-support", "top-k"],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_torch_rules_caps_and_supports(kw, dtype):
    est = _budget(True, **kw)
    tol = (1e-10, 1e-13) if dtype == np.float64 else (2e-5, 1e-6)
    _compare(est, _torch, dtype, True, *tol, T=2)


def test_array_api_strict_gives_numpys_counts_and_outputs():
    xps = pytest.importorskip("array_api_strict")
    for causal in (False, True):
        _compare(
            _budget(causal), lambda a: None if a is None else xps.asarray(a), np.float64, True, 1e-10, 1e-13
        )


@needs_torch
def test_a_single_draw_and_a_tensor_that_requires_grad():
    Q, K, V, _ = _inputs(seed=2, n=24)
    est = _budget(True)
    ref = est(Q, K, V, rng=1)
    t = [torch.tensor(a, requires_grad=True) for a in (Q, K, V)]
    got = est(*t, rng=1)
    assert tuple(got.output.shape) == Q.shape[:2] + (V.shape[-1],)
    np.testing.assert_array_equal(got.cost.exact_logits.detach().numpy(), ref.cost.exact_logits)
    np.testing.assert_allclose(got.output.detach().numpy(), ref.output, rtol=1e-10, atol=1e-13)
    got.output.sum().backward()
    assert all(a.grad is not None and bool(torch.all(torch.isfinite(a.grad))) for a in t)


@needs_torch
def test_accelerator_sized_blocks_draw_numpys_numbers(monkeypatch):
    """On an accelerator the rows are computed in larger blocks (Hybrid's budget there is 2^26
    elements); the uniforms are still drawn in the CPU's row blocks: the same counts and outputs."""
    from rfkit.attention import _hybrid

    Q, K, V, mask = _inputs(seed=3, n=160, masked=True)
    est = _budget(True)
    ref = est(Q, K, V, rng=4, n_draws=2, key_padding_mask=mask)
    monkeypatch.setattr(_hybrid, "_BLOCK_ELEMS", 1 << 26)
    got = est(*(torch.asarray(a) for a in (Q, K, V)), rng=4, n_draws=2, key_padding_mask=torch.asarray(mask))
    np.testing.assert_array_equal(got.cost.exact_logits.numpy(), ref.cost.exact_logits)
    np.testing.assert_allclose(got.output.numpy(), ref.output, rtol=1e-10, atol=1e-13)


@needs_torch
def test_backend_helpers_of_the_budget_agree_with_numpy():
    """first_of_order, row_weighted_sum and promoted_matmul: NumPy's paths and the namespace paths."""
    from rfkit._backend import get_backend
    from rfkit._backend_ops import first_of_order, promoted_matmul, row_weighted_sum

    xp = get_backend(("x", torch.zeros(1))).xp
    rng = np.random.default_rng(9)
    key = rng.random((3, 4, 20))  # distinct keys: every sort gives the same order
    np.testing.assert_array_equal(
        first_of_order(torch.asarray(key), 7, xp).numpy(), first_of_order(key, 7, np)
    )
    np.testing.assert_array_equal(
        first_of_order(key, 7, np), np.argsort(key, axis=-1, kind="stable")[..., :7]
    )
    w, v = rng.random((3, 4, 6)), rng.normal(size=(3, 4, 6, 2))
    want = np.sum(w[..., None] * v, axis=-2)
    np.testing.assert_allclose(row_weighted_sum(w, v, np), want, rtol=1e-12)
    np.testing.assert_allclose(
        row_weighted_sum(torch.asarray(w), torch.asarray(v), xp).numpy(), want, rtol=1e-12
    )
    a, b = rng.random((3, 1, 6)), rng.normal(size=(3, 6, 2)).astype(np.float32)
    got = promoted_matmul(torch.asarray(a), torch.asarray(b), xp)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), promoted_matmul(a, b, np), rtol=1e-12)
    np.testing.assert_array_equal(promoted_matmul(a, b, np), a @ b.astype(np.float64))
