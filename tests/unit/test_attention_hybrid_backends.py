"""Hybrid on every backend: window, sinks and LSH supports built in the input's namespace (torch,
array_api_strict, CUDA where present) equal NumPy to 1e-10 in float64, and nothing is copied to
the host (docs page *Sparse + random features*); the sampled remainders draw NumPy's samples with an
accelerator's block size (docs page *PyTorch and Hugging Face*)."""

from __future__ import annotations

import numpy as np
import pytest
from backend_marks import HAS_CUDA, needs_cuda, needs_torch, torch

import rfkit as rk
from rfkit._backend import get_backend, to_numpy
from rfkit.attention._support import lsh_codes, lsh_support, union_support, window_support

H = rk.attention.Hybrid

SUPPORTS = [
    {"window": 2},
    {"n_global": 3},
    {"window": 1, "n_global": 2},
    {"lsh_buckets": 4},
    {"lsh_buckets": 6, "window": 1, "n_global": 1},
]


def _inputs(seed=0, lead=(2, 2), n=20, d=6, dv=3, scale=0.6, masked=False):
    rng = np.random.default_rng(seed)
    Q = scale * rng.normal(size=lead + (n, d))
    K = scale * rng.normal(size=lead + (n, d))
    V = rng.normal(size=lead + (n, dv))
    mask = None
    if masked:
        mask = np.zeros(lead + (n,), dtype=bool)
        mask[..., -3:] = True
        mask[0, ..., 5] = True
    return Q, K, V, mask


try:
    import array_api_strict as xps
except ImportError:  # pragma: no cover - optional (a GPU machine may lack it)
    xps = None


def _strict(a):
    return None if a is None else xps.asarray(a)


def _torch(a):
    return None if a is None else torch.asarray(a)


def _run(est, conv, Q, K, V, mask, **kw):
    r = est(conv(Q), conv(K), conv(V), rng=7, key_padding_mask=conv(mask), **kw)
    return r


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", ["plain", "ratio"])
@pytest.mark.parametrize("kw", SUPPORTS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_backends_equal_numpy(kw, variant, causal, masked):
    Q, K, V, mask = _inputs(masked=masked)
    est = H(rk.features.Positive(16), variant=variant, causal=causal, shared_across_heads=False, **kw)
    ref = est(Q, K, V, rng=7, key_padding_mask=mask, n_draws=2)
    convs = [] if xps is None else [_strict]
    if torch is not None:
        convs.append(_torch)
    for conv in convs:
        got = _run(est, conv, Q, K, V, mask, n_draws=2)
        for a, b in (
            (got.output, ref.output),
            (got.normalizer, ref.normalizer),
            (got.numerator, ref.numerator),
        ):
            np.testing.assert_allclose(to_numpy(a), b, rtol=1e-10, atol=1e-13)
        assert got.n_nonpositive == ref.n_nonpositive


@needs_torch
@pytest.mark.parametrize("causal", [False, True])
def test_no_host_copy_of_torch_inputs(monkeypatch, causal):
    """Every host copy of a torch tensor goes through Tensor.numpy (rfkit's to_numpy, np.asarray): only
    reductions (a few scalars, e.g. the validation's largest magnitudes) may come back, never an
    array with a row per query or key."""
    Q, K, V, mask = _inputs(seed=1, masked=True)
    est = H(rk.features.Positive(16), window=2, n_global=1, lsh_buckets=4, variant="ratio", causal=causal)
    ref = est(Q, K, V, rng=3, key_padding_mask=mask).output
    tQ, tK, tV, tm = (torch.asarray(a) for a in (Q, K, V, mask))

    original = torch.Tensor.numpy

    def refuse(self, *a, **k):
        if self.numel() >= Q.shape[-2]:
            raise AssertionError(f"a torch tensor of shape {tuple(self.shape)} was copied to the host")
        return original(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "numpy", refuse)
    out = est(tQ, tK, tV, rng=3, key_padding_mask=tm).output
    monkeypatch.undo()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-13)


def test_support_helpers_in_a_strict_namespace():
    pytest.importorskip("array_api_strict")
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2, 30, 5))
    R = rng.normal(size=(5, 3))
    h = lsh_codes(X, R)
    hs = lsh_codes(xps.asarray(X), xps.asarray(R))
    np.testing.assert_array_equal(np.asarray(hs), h)
    i_np, v_np = lsh_support(h[:, :10], h)
    i_s, v_s = lsh_support(hs[:, :10], hs)
    np.testing.assert_array_equal(np.asarray(i_s), i_np)
    np.testing.assert_array_equal(np.asarray(v_s), v_np)
    u_np = union_support([window_support(6, 6, 1, False), (i_np[:, :6, :], v_np[:, :6, :])])
    bk = get_backend(("X", hs))
    u_s = union_support([window_support(6, 6, 1, False, bk), (i_s[:, :6, :], v_s[:, :6, :])])
    for a, b in zip(u_s, u_np):
        np.testing.assert_array_equal(np.asarray(a), b)


@needs_cuda
@pytest.mark.parametrize("kw", SUPPORTS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_cuda_equals_numpy(kw):  # pragma: no cover - runs on a GPU machine
    assert HAS_CUDA
    Q, K, V, mask = _inputs(seed=4, masked=True)
    for causal in (False, True):
        for variant in ("plain", "ratio"):
            est = H(rk.features.Positive(16), variant=variant, causal=causal, **kw)
            ref = est(Q, K, V, rng=5, key_padding_mask=mask).output
            c = [torch.asarray(a, device="cuda") for a in (Q, K, V, mask)]
            out = est(*c[:3], rng=5, key_padding_mask=c[3]).output
            assert out.device.type == "cuda"
            np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-9, atol=1e-12)


SAMPLED = [
    {"remainder": "uniform", "n_samples": 5, "window": 2, "n_global": 1},
    {"remainder": "stratified", "n_samples": 5, "window": 2},
    {"remainder": "importance", "n_samples": 5, "scorer": "proxy", "n_global": 1},
    {"remainder": "uniform", "n_samples": 4, "window": 1, "top_k": 6, "scorer": "proxy"},
    {"remainder": "stratified", "n_samples": 4, "top_k": 6, "scorer": "quest", "block_size": 8},
    {"remainder": "importance", "n_samples": 4, "window": 1, "top_k": 5, "scorer": "lsh"},
]


@needs_torch
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("kw", SAMPLED, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_accelerator_sized_blocks_draw_numpys_samples(monkeypatch, kw, causal):
    """On an accelerator Hybrid computes its rows in blocks of 2^26 work elements (2^18 on the CPU):
    the fixed-count sampled remainders still draw the CPU's uniforms, so a torch call with the
    accelerator's block budget gives the NumPy call's counts and outputs."""
    from rfkit import _backend
    from rfkit.attention import _hybrid

    Q, K, V, mask = _inputs(seed=6, lead=(2, 3), n=300, d=16, dv=4, scale=0.5, masked=True)
    est = H(causal=causal, **kw)
    ref = est(Q, K, V, rng=7, n_draws=3, key_padding_mask=mask)
    monkeypatch.setitem(_backend._ROW_BLOCK_ELEMS, "cpu", _backend._ROW_BLOCK_ELEMS["accelerator"])
    assert max(_hybrid._BLOCK_ELEMS, get_backend(("Q", torch.asarray(Q))).row_block_elems) == 1 << 26
    got = _run(est, _torch, Q, K, V, mask, n_draws=3)
    for name in ("exact_logits", "values_read", "scoring_products"):
        np.testing.assert_array_equal(to_numpy(getattr(got.cost, name)), getattr(ref.cost, name))
    for a, b in (
        (got.output, ref.output),
        (got.log_scale, ref.log_scale),
        (got.denominator_values, ref.denominator_values),
        (got.numerator_values, ref.numerator_values),
    ):
        np.testing.assert_allclose(to_numpy(a), b, rtol=1e-10, atol=1e-13)


@needs_cuda
@pytest.mark.parametrize("kw", SAMPLED, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_cuda_sampled_remainders_equal_numpy(kw):  # pragma: no cover - runs on a GPU machine
    """On CUDA (work blocks of 2^26 elements) the sampled remainders draw NumPy's samples."""
    Q, K, V, mask = _inputs(seed=6, lead=(2, 3), n=300, d=16, dv=4, scale=0.5, masked=True)
    for causal in (False, True):
        est = H(causal=causal, **kw)
        ref = est(Q, K, V, rng=5, n_draws=3, key_padding_mask=mask)
        c = [torch.asarray(a, device="cuda") for a in (Q, K, V, mask)]
        got = est(*c[:3], rng=5, n_draws=3, key_padding_mask=c[3])
        assert got.output.device.type == "cuda"
        np.testing.assert_array_equal(got.cost.exact_logits.cpu().numpy(), ref.cost.exact_logits)
        np.testing.assert_allclose(got.output.cpu().numpy(), ref.output, rtol=1e-9, atol=1e-12)
