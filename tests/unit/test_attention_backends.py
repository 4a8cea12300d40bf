"""rk.attention on array backends and threads: namespaces, agreement, bad input, bit-identity.

Every estimator (exact softmax; RFA bidirectional and causal with exponential, trig and generic
maps; RA; SNIS and LARA, bidirectional and causal; with and without a key padding mask) is run
on ``array_api_strict`` (a strict, pure-Python namespace: the code keeps to the standard) and,
where installed, PyTorch on the CPU (a real second library). Every array of the result must
have the input's namespace and dtype (no silent NumPy fallback) and agree with NumPy to
round-off (float64: 1e-10, float32: 1e-4, normwise relative). On NumPy, results must be
bit-identical for 1, 2 and 3 threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_marks import cupy, needs_cuda, needs_cupy, needs_torch, torch

import rfkit as rk
from rfkit import attention as att
from rfkit._backend import get_backend, to_numpy
from rfkit.attention import _causal
from rfkit.exceptions import BackendError

xps = pytest.importorskip("array_api_strict", reason="array-api-strict is a dev dependency of rfkit")


FIELDS = (
    "output",
    "log_scale",
    "numerator_values",
    "denominator_values",
    "ess",
    "omega",
    "proposal_means",
    "mcse",
)

ESTIMATORS = {
    "rfa": att.RFA(rk.features.Positive(16), chunk_size=7),
    "rfa-causal": att.RFA(rk.features.Positive(16), causal=True, chunk_size=6),
    "rfa-hyperbolic-causal": att.RFA(
        rk.features.Hyperbolic(8, projection="orthogonal"), causal=True, chunk_size=5
    ),
    "rfa-trig-causal": att.RFA(rk.features.Trig(16), causal=True, chunk_size=6),
    "rfa-taylor": att.RFA(rk.features.Taylor(2), chunk_size=6),
    "ra": att.RA(n_samples=3, chunk_size=7),
    "ra-causal": att.RA(n_samples=3, causal=True),
    "snis": att.SNIS(n_samples=8),
    "snis-chunk-mean": att.SNIS("chunk-mean", n_samples=8, n_chunks=4),
    "snis-causal": att.SNIS(n_samples=8, causal=True, chunk_size=6),
    "snis-chunk-mean-causal": att.SNIS("chunk-mean", n_samples=8, n_chunks=4, causal=True, chunk_size=3),
    "lara": att.LARA(n_proposals=4, samples_per_proposal=2),
    "lara-balance": att.LARA(n_proposals=4, weights="balance"),
    "lara-causal": att.LARA(
        n_proposals=4, weights="balance", causal=True, samples_per_proposal=2, chunk_size=3
    ),
}


def problem(dtype="float64"):
    rng = np.random.default_rng(2442101192988600726)
    Q, K, V = 0.4 * rng.standard_normal((3, 2, 3, 20, 5))
    mask = np.zeros((2, 3, 20), dtype=bool)
    mask[0, 1, 5:9] = True
    mask[1, :, -3:] = True
    return Q.astype(dtype), K.astype(dtype), V.astype(dtype), mask


def _strict(a):
    return xps.asarray(a)


def _torch(a):
    return torch.asarray(a)


def _torch_cuda(a):
    return torch.asarray(a, device="cuda")


def _cupy(a):
    return cupy.asarray(a)


BACKENDS = [
    pytest.param(_strict, id="array_api_strict"),
    pytest.param(_torch, id="torch", marks=needs_torch),
    pytest.param(_torch_cuda, id="torch-cuda", marks=needs_cuda),
    pytest.param(_cupy, id="cupy", marks=needs_cupy),
]


def _agree(a, b, dtype, what):
    tol = 1e-10 if dtype == "float64" else 1e-4
    scale = float(np.nanmax(np.abs(b))) if b.size else 1.0
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(scale, 1.0), err_msg=what)


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.NonPositiveNormalizerWarning"
)  # trig: NaN rows compared too
@pytest.mark.parametrize("conv", BACKENDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_estimators_on_backends_agree_with_numpy(name, masked, dtype, conv):
    est = ESTIMATORS[name]
    Q, K, V, mask = problem(dtype)
    m = mask if masked else None
    ref = est(Q, K, V, rng=3, key_padding_mask=m)
    res = est(conv(Q), conv(K), conv(V), rng=3, key_padding_mask=None if m is None else conv(m))
    kind = type(conv(Q))
    for f in FIELDS:
        a, b = getattr(res, f), getattr(ref, f)
        if b is None:
            assert a is None, f
            continue
        assert type(a) is kind, (f, type(a))  # never a silent NumPy fallback
        assert get_backend((f, a)).dtype_name(a.dtype) == dtype, (f, a.dtype)
        assert tuple(a.shape) == b.shape, f
        _agree(to_numpy(a), b, dtype, f)
    assert res.n_nonpositive == ref.n_nonpositive
    assert res.n_floored == ref.n_floored and res.n_negative_alpha == ref.n_negative_alpha
    if ref.log_scale is not None:  # the properties work on every backend
        assert type(res.log_normalizer) is kind and type(res.normalizer_sign) is kind
        _agree(to_numpy(res.normalizer), ref.normalizer, dtype, "normalizer")
        _agree(to_numpy(res.numerator), ref.numerator, dtype, "numerator")


@pytest.mark.parametrize("conv", BACKENDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_softmax_and_rfa_draws_on_backends(conv, dtype):
    Q, K, V, mask = problem(dtype)
    for causal in (False, True):
        out = att.softmax(conv(Q), conv(K), conv(V), causal=causal, key_padding_mask=conv(mask), chunk_size=3)
        assert type(out) is type(conv(Q))
        _agree(to_numpy(out), att.softmax(Q, K, V, causal=causal, key_padding_mask=mask), dtype, "softmax")
        # T draws at once, per-head draws, a data-dependent map fitted on the backend
        for est in (
            att.RFA(rk.features.Positive(8), causal=causal, shared_across_heads=False),
            att.RFA(rk.features.CEXP(8, A="mean"), causal=causal),
        ):
            ref = est(Q, K, V, rng=5, n_draws=3)
            res = est(conv(Q), conv(K), conv(V), rng=5, n_draws=3)
            assert type(res.output) is type(conv(Q)) and tuple(res.output.shape) == ref.output.shape
            _agree(to_numpy(res.output), ref.output, dtype, "rfa n_draws")
            _agree(to_numpy(res.log_normalizer), ref.log_normalizer, dtype, "rfa n_draws log_normalizer")


def test_mixed_backends_in_one_call_are_refused():
    Q, K, V, mask = problem()
    with pytest.raises(
        BackendError, match=r"`Q` is a array_api_strict array but `key_padding_mask` is a numpy"
    ):
        att.RFA(rk.features.Positive(4))(_strict(Q), _strict(K), _strict(V), rng=0, key_padding_mask=mask)
    with pytest.raises(BackendError, match=r"`Q` is a numpy array but `proposal` is a array_api_strict"):
        att.SNIS(proposal=_strict(np.zeros((2, 5))), n_samples=4)(Q, K, V, rng=0)
    with pytest.raises(
        BackendError, match=r"`Q` is a numpy array but `proposal_means` is a array_api_strict"
    ):
        att.LARA(proposal_means=_strict(np.zeros((2, 5))))(Q, K, V, rng=0)
    with pytest.raises(BackendError, match=r"`V` is a array_api_strict array"):
        att.RA(n_samples=2)(Q, K, _strict(V), rng=0)
    dev = xps.Device("device1")
    with pytest.raises(BackendError, match=r"never copies between devices"):
        att.softmax(_strict(Q), _strict(K), xps.asarray(V, device=dev))


@needs_torch
def test_torch_mask_dtype_and_device_are_checked():
    Q, K, V, mask = problem()
    tq, tk, tv = (torch.asarray(a) for a in (Q, K, V))
    with pytest.raises(rk.exceptions.InvalidParameterError, match=r"`key_padding_mask` .* boolean .* int64"):
        att.SNIS(n_samples=4)(tq, tk, tv, rng=0, key_padding_mask=torch.zeros(20, dtype=torch.int64))
    meta = torch.zeros(20, dtype=torch.bool, device="meta")
    with pytest.raises(BackendError, match="never copies between devices"):
        att.LARA(n_proposals=2)(tq, tk, tv, rng=0, key_padding_mask=meta)


META_CALLS = {  # call, and the name of its first array argument
    "rfa": (lambda Q, K, V: att.RFA(rk.features.Positive(8))(Q, K, V, rng=0), "Q"),
    "rfa-causal": (lambda Q, K, V: att.RFA(rk.features.Positive(8), causal=True)(Q, K, V, rng=0), "Q"),
    "softmax": (lambda Q, K, V: att.softmax(Q, K, V), "Q"),
    "ra": (lambda Q, K, V: att.RA(n_samples=4)(Q, K, V, rng=0), "Q"),
    "draw.kernel": (lambda Q, K, V: rk.features.Positive(8).sample(dim=5, rng=0).kernel(Q, K), "X"),
    "softmax_kernel": (lambda Q, K, V: rk.softmax_kernel(Q, K), "X"),
}


@needs_torch
@pytest.mark.parametrize("call", META_CALLS)
def test_torch_meta_tensors_are_refused_with_the_device_error(call):
    """Shape-only (meta) tensors hold no data to estimate from: a BackendError naming the argument,
    the rule and the device, at backend resolution (not a raw NotImplementedError on a copy)."""
    Q, K, V = (torch.empty((2, 20, 5), dtype=torch.float64, device="meta") for _ in range(3))
    fn, arg = META_CALLS[call]
    with pytest.raises(BackendError, match=rf"`{arg}` is on the meta device .*no data.* Move the arrays to"):
        fn(Q, K, V)


# --------------------------------------------------------------------------- threads
THREAD_CASES = {
    "softmax": lambda Q, K, V, m, nt: att.softmax(Q, K, V, key_padding_mask=m, chunk_size=40, n_threads=nt),
    "softmax-causal": lambda Q, K, V, m, nt: att.softmax(Q, K, V, causal=True, chunk_size=40, n_threads=nt),
    "rfa": lambda Q, K, V, m, nt: att.RFA(rk.features.Positive(32), chunk_size=50, n_threads=nt)(
        Q, K, V, rng=1, key_padding_mask=m
    ),
    "rfa-trig": lambda Q, K, V, m, nt: att.RFA(rk.features.Trig(16), chunk_size=50, n_threads=nt)(
        Q, K, V, rng=1
    ),
    "rfa-causal": lambda Q, K, V, m, nt: att.RFA(
        rk.features.Positive(32), causal=True, chunk_size=16, n_threads=nt
    )(Q, K, V, rng=1, key_padding_mask=m),
    "rfa-taylor-causal": lambda Q, K, V, m, nt: att.RFA(
        rk.features.Taylor(2), causal=True, chunk_size=16, n_threads=nt
    )(Q, K, V),
    "ra": lambda Q, K, V, m, nt: att.RA(n_samples=2, chunk_size=30, n_threads=nt)(
        Q, K, V, rng=1, key_padding_mask=m
    ),
    "ra-causal": lambda Q, K, V, m, nt: att.RA(n_samples=2, causal=True, chunk_size=30, n_threads=nt)(
        Q, K, V, rng=1
    ),
    "snis": lambda Q, K, V, m, nt: att.SNIS("chunk-mean", n_samples=32, chunk_size=50, n_threads=nt)(
        Q, K, V, rng=1, key_padding_mask=m
    ),
    "snis-causal": lambda Q, K, V, m, nt: att.SNIS(
        "chunk-mean", n_samples=32, n_chunks=5, causal=True, chunk_size=16, n_threads=nt
    )(Q, K, V, rng=1, key_padding_mask=m),
    "lara": lambda Q, K, V, m, nt: att.LARA(
        n_proposals=8, samples_per_proposal=4, chunk_size=50, n_threads=nt
    )(Q, K, V, rng=1, key_padding_mask=m),
    "lara-causal": lambda Q, K, V, m, nt: att.LARA(
        n_proposals=6, weights="balance", samples_per_proposal=4, causal=True, chunk_size=16, n_threads=nt
    )(Q, K, V, rng=1, key_padding_mask=m),
}


@pytest.fixture
def small_segments(monkeypatch):
    """Causal scans of several segments and several rounds even at these small sizes."""
    monkeypatch.setattr(_causal, "SEGMENT_ELEMS", 1 << 12)
    monkeypatch.setattr(_causal, "ROUND_ELEMS", 1 << 14)


def _arrays(res):
    if not hasattr(res, "method"):
        return [res]
    return [getattr(res, f) for f in FIELDS if getattr(res, f) is not None]


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.NonPositiveNormalizerWarning")
@pytest.mark.parametrize("name", list(THREAD_CASES))
def test_results_are_bit_identical_for_any_thread_count(name, small_segments):
    rng = np.random.default_rng(7)
    Q, K, V = 0.4 * rng.standard_normal((3, 2, 300, 6))
    mask = np.zeros((2, 300), dtype=bool)
    mask[0, 17:140] = True
    mask[1, 250:] = True
    fn = THREAD_CASES[name]
    base = _arrays(fn(Q, K, V, mask, 1))
    for nt in (2, 3, 8):  # causal scans group their blocks by the thread count: results may not move
        with rk.threads(nt):  # the context and the argument agree
            other = _arrays(fn(Q, K, V, mask, nt))
        for a, b in zip(base, other):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["rfa-causal", "rfa-taylor-causal", "snis-causal", "lara-causal"])
def test_causal_segments_and_rounds_do_not_change_results(name, monkeypatch):
    rng = np.random.default_rng(8)
    Q, K, V = 0.4 * rng.standard_normal((3, 2, 300, 6))
    mask = np.zeros((2, 300), dtype=bool)
    mask[1, 3:77] = True
    fn = THREAD_CASES[name]
    ref = _arrays(fn(Q, K, V, mask, 2))
    monkeypatch.setattr(_causal, "SEGMENT_ELEMS", 1 << 11)
    monkeypatch.setattr(_causal, "ROUND_ELEMS", 1 << 12)
    for a, b in zip(ref, _arrays(fn(Q, K, V, mask, 2))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_n_threads_is_validated():
    for make in (
        lambda: att.RFA(rk.features.Positive(4), n_threads=0),
        lambda: att.RA(n_threads=1.5),
        lambda: att.SNIS(n_threads=-1),
        lambda: att.LARA(n_threads="all"),
    ):
        with pytest.raises(
            rk.exceptions.InvalidParameterError, match=r"The `n_threads` parameter of \w+ must be"
        ):
            make()
    with pytest.raises(rk.exceptions.InvalidParameterError, match="`n_threads` parameter of softmax"):
        att.softmax(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), n_threads=0)
