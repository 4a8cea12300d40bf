"""Array backends: namespace discipline, agreement with NumPy, bad input, threads.

``array_api_strict`` (a strict, pure-Python namespace) checks that the estimate paths keep
to the array API standard; PyTorch on the CPU (when installed) checks a real second
library. Outputs must have the input's namespace, device and dtype and agree with NumPy
to round-off (float64: 1e-10 relative; float32: 1e-4).
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_marks import cupy, needs_cuda, needs_cupy, needs_torch, torch

import rfkit as rk
from rfkit._backend import get_backend, to_numpy
from rfkit.exceptions import BackendError, BackendNotInstalledError, InvalidParameterError

xps = pytest.importorskip("array_api_strict", reason="array-api-strict is a dev dependency of rfkit")


rng0 = np.random.default_rng(2442101192988600726)
X = 0.3 * rng0.normal(size=(2, 7, 5))
Y = 0.3 * rng0.normal(size=(2, 9, 5))
Xp = 0.3 * rng0.normal(size=(2, 7, 5))  # pairs with X

MAPS = [
    rk.features.Positive(16),
    rk.features.Positive(16, projection="orthogonal"),
    rk.features.Positive(8, projection="structured"),
    rk.features.Hyperbolic(8, projection="qmc"),
    rk.features.Trig(8),
    rk.features.Trig(8, projection="orthogonal-fixed"),
    rk.features.OPRF(16, A=-0.05),
    rk.features.OPRF(8, A=-0.05, hyperbolic=True, projection="simplex"),
    rk.features.Positive(16, projection="simplex"),
    rk.features.Hyperbolic(8, projection="simplex-plus"),
    rk.features.GERF(8, A=-0.02, s=-1, projection="simplex"),
    rk.features.GERF(16, A=-0.05),
    rk.features.SADERF(16, A=-0.05, psi=np.linspace(0.7, 1.4, 5)),
    rk.features.CEXP(16, A=np.full(5, 1.3)),
    rk.features.HCEXP(8, A=np.diag(np.linspace(0.5, 2.0, 5))),
    rk.features.Taylor(3),
    rk.features.Limit(2),
    rk.features.ADERF(16).fit(X[0], Y[0]),
    rk.features.SDERF(16, projection="orthogonal").fit(X[0], Y[0]),
    rk.features.RandomMaclaurin(16),
    rk.features.RandomMaclaurin(8, max_degree=3, distribution="gaussian"),
    rk.features.TensorSketch(8, 3),
]
METHODS = ("kernel", "log_kernel", "pairwise", "log_pairwise")


def _strict(a: np.ndarray, dtype: str = "float64"):
    return xps.asarray(a, dtype=getattr(xps, dtype))


def _torch(a: np.ndarray, dtype: str = "float64"):
    return torch.asarray(a, dtype=getattr(torch, dtype))


def _torch_cuda(a: np.ndarray, dtype: str = "float64"):
    return torch.asarray(a, dtype=getattr(torch, dtype), device="cuda")


def _cupy(a: np.ndarray, dtype: str = "float64"):
    return cupy.asarray(a, dtype=getattr(cupy, dtype))


def _call(draw, method: str, conv, dtype: str):
    other = Y if method in ("kernel", "log_kernel") else Xp
    return getattr(draw, method)(conv(X, dtype), conv(other, dtype))


def _reference(draw, method: str, dtype: str) -> np.ndarray:
    other = Y if method in ("kernel", "log_kernel") else Xp
    return getattr(draw, method)(X.astype(dtype), other.astype(dtype))


def _agree(out: np.ndarray, ref: np.ndarray, method: str, dtype: str) -> None:
    """Relative agreement; logs near 0 and sign-changing values (trig features, signed estimates)
    near 0 get the absolute part of a normwise tolerance (tol x the largest magnitude)."""
    tol = 1e-10 if dtype == "float64" else 1e-4
    finite = np.abs(ref[np.isfinite(ref)])
    scale = (
        1.0 if method.startswith("log") else (float(finite.max()) if finite.size and (ref < 0).any() else 0.0)
    )
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * scale)


BACKENDS = [
    pytest.param(_strict, id="array_api_strict"),
    pytest.param(_torch, id="torch", marks=needs_torch),
    pytest.param(_torch_cuda, id="torch-cuda", marks=needs_cuda),
    pytest.param(_cupy, id="cupy", marks=needs_cupy),
]


@pytest.mark.parametrize("conv", BACKENDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n_draws", [None, 3])
@pytest.mark.parametrize("fm", MAPS, ids=lambda f: repr(f)[:40])
def test_feature_maps_agree_with_numpy(fm, n_draws, dtype, conv):
    draw = fm.sample(5, rng=11, n_draws=n_draws)
    like = conv(X, dtype)
    for method in METHODS:
        out = _call(draw, method, conv, dtype)
        assert type(out) is type(like), (method, type(out))
        assert str(get_backend(("out", out)).device) == str(get_backend(("like", like)).device)
        assert get_backend(("out", out)).dtype_name(out.dtype) == dtype
        ref = _reference(draw, method, dtype)
        assert tuple(out.shape) == ref.shape
        _agree(to_numpy(out), ref, method, dtype)
    f = draw.queries(conv(X, dtype))
    assert type(f.values) is type(conv(X, dtype)) and type(f.log_scale) is type(conv(X, dtype))
    ref_f = draw.queries(X.astype(dtype))
    _agree(to_numpy(f.dense()), ref_f.dense(), "dense", dtype)


@pytest.mark.parametrize("conv", BACKENDS)
def test_exact_kernels_and_deterministic_exact(conv):
    for fn in (rk.softmax_kernel, rk.log_softmax_kernel, rk.gaussian_kernel, rk.log_gaussian_kernel):
        out = fn(conv(X), conv(Y))
        assert type(out) is type(conv(X))
        _agree(to_numpy(out), fn(X, Y), "kernel", "float64")
    for fm in (rk.features.Taylor(5), rk.features.Limit(3)):
        s, la = fm.slog_exact_kernel(conv(X), conv(Y))
        s0, la0 = fm.slog_exact_kernel(X, Y)
        np.testing.assert_array_equal(to_numpy(s), s0)
        _agree(to_numpy(la), la0, "log", "float64")


@pytest.mark.parametrize("conv", BACKENDS)
def test_logspace_survives_large_norms(conv):
    big = 30.0 * X / np.linalg.norm(X, axis=-1, keepdims=True)
    draw = rk.features.Positive(64).sample(5, rng=3)
    out = to_numpy(draw.log_kernel(conv(big), conv(Y)))
    assert np.all(np.isfinite(out))
    _agree(out, draw.log_kernel(big, Y), "log", "float64")


# --------------------------------------------------------------------------- bad input
class _AlienArray:
    """An array object of a library rfkit does not compute on."""

    __module__ = "alienlib.core"
    shape = (3, 2)
    dtype = "float64"

    def __array_namespace__(self, api_version=None):  # pragma: no cover - never called
        raise AssertionError


def test_unsupported_library_is_named():
    with pytest.raises(BackendError, match=r"`X` is an array of 'alienlib'"):
        rk.softmax_kernel(_AlienArray(), Y)
    draw = rk.features.Positive(8).sample(5, rng=0)
    with pytest.raises(BackendError, match=r"`Y` is an array of 'alienlib'"):
        draw.kernel(X, _AlienArray())


def test_mixed_libraries_refused():
    with pytest.raises(BackendError, match=r"`X` is a array_api_strict array but `Y` is a numpy array"):
        rk.softmax_kernel(_strict(X), Y)
    draw = rk.features.Positive(8).sample(5, rng=0)
    with pytest.raises(BackendError, match="one call computes on one library"):
        draw.pairwise(X, _strict(Xp))


def test_mixed_devices_refused():
    dev = xps.Device("device1")
    a = xps.asarray(X)
    b = xps.asarray(Y, device=dev)
    with pytest.raises(BackendError, match=r"`X` is on device .*CPU_DEVICE.* but `Y` is on device .*device1"):
        rk.softmax_kernel(a, b)


@needs_cuda
def test_cuda_tensor_with_cpu_tensor_refused():
    with pytest.raises(BackendError, match=r"`X` is on device cuda:0 but `Y` is on device cpu"):
        rk.softmax_kernel(_torch_cuda(X), torch.asarray(Y))


@needs_torch
def test_torch_mixed_devices_and_dtypes():
    a = torch.asarray(X)
    with pytest.raises(BackendError, match="never copies between devices"):
        rk.softmax_kernel(a, torch.empty((2, 9, 5), dtype=torch.float64, device="meta"))
    # half precision is computed in float32 and returned in the inputs' dtype (docs page Backends)
    half = rk.softmax_kernel(torch.asarray(X, dtype=torch.float16), torch.asarray(Y, dtype=torch.float16))
    assert half.dtype == torch.float16
    with pytest.raises(InvalidParameterError, match=r"`Y` must be a floating-point array .* dtype int64"):
        rk.features.Positive(4).sample(5, rng=0).kernel(a, torch.ones((3, 5), dtype=torch.int64))
    bad = torch.asarray(X).clone()
    bad[1, 2, 3] = float("nan")
    with pytest.raises(
        rk.exceptions.NonFiniteInputError, match=r"`X` contains NaN \(first at index \(1, 2, 3\)\)"
    ):
        rk.softmax_kernel(bad, torch.asarray(Y))


def test_backend_for_names_missing_library():
    from rfkit._backend import backend_for

    assert backend_for("numpy").is_numpy
    with pytest.raises(BackendError, match=r"The `backend` must be one of"):
        backend_for("tensorflow")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(BackendNotInstalledError, match="needs the package 'cupy'"):
            backend_for("cupy")
    with pytest.raises(BackendError, match="CPU only"):
        backend_for("numpy", "cuda")


# --------------------------------------------------------------------------- threads
def test_results_do_not_depend_on_thread_count():
    rng = np.random.default_rng(7)
    A = 0.3 * rng.normal(size=(3000, 16)).astype(np.float32)
    B = 0.3 * rng.normal(size=(1500, 16)).astype(np.float32)
    outs = {}
    for n in (1, 2, 3, 5):
        with rk.threads(n):
            res = []
            for fm in (rk.features.Positive(128), rk.features.Trig(64), rk.features.Hyperbolic(64)):
                d = fm.sample(16, rng=2)
                dT = fm.sample(16, rng=2, n_draws=40)
                f = d.queries(A)
                res += [f.values, f.log_scale, d.kernel(A, B), dT.pairwise(A[:500], B[:500])]
            outs[n] = res
    for n in (2, 3, 5):
        for a, b in zip(outs[1], outs[n]):
            np.testing.assert_array_equal(a, b)  # bit-identical


def test_thread_settings_validated(monkeypatch):
    from rfkit._parallel import resolve_threads

    with pytest.raises(
        InvalidParameterError, match=r"The `n_threads` parameter of rfkit.threads must be an int"
    ):
        with rk.threads(0):
            pass
    monkeypatch.setenv("RFKIT_NUM_THREADS", "many")
    with pytest.raises(InvalidParameterError, match=r"RFKIT_NUM_THREADS must be an integer >= 1.*'many'"):
        resolve_threads(None, "test")
    monkeypatch.setenv("RFKIT_NUM_THREADS", "3")
    assert resolve_threads(None, "test") == 3
    with rk.threads(2):
        assert resolve_threads(None, "test") == 2
    assert resolve_threads(5, "test") == 5


def test_count_at_most_equals_the_comparison_count_on_every_library():
    """RA's inverse-CDF step: NumPy's binary search per row gives the counts of the comparison."""
    from rfkit._backend import backend_for

    rng = np.random.default_rng(4)
    p = rng.random((7, 9))
    p[:, 3] = 0.0  # a flat step of the CDF
    cum = np.cumsum(p, axis=1)
    cum /= cum[:, -1:]
    u = rng.random((7, 11))
    u[:, 0] = cum[:, 2]  # ties: a value equal to an entry counts it
    rows = cum[:, :-1]
    ref = (rows[:, None, :] <= u[:, :, None]).sum(axis=-1)
    for name in ["numpy", "array_api_strict"] + (["torch"] if torch is not None else []):
        bk = backend_for(name)
        got = to_numpy(bk.count_at_most(bk.asarray(rows), bk.asarray(u)))
        assert got.dtype == np.int64 and np.array_equal(got, ref), name
