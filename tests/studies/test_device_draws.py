"""``draws = "backend"``: directions drawn by the backend's own generator on its device.

Statistically equivalent to NumPy's draws (every MSE within 5 combined MCSE of the NumPy run's,
on CPU PyTorch), reproducible for one backend and device, independent of the number of workers,
the same assembly as NumPy's given the same random numbers, recorded in the provenance and part
of the run's identity; bad values are named errors."""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
import rfkit.projections as P
import rfkit.study as st
from rfkit._backend import backend_for
from rfkit._backend_random import BackendGenerator
from rfkit.exceptions import InvalidParameterError, StudyError
from rfkit.projections._device import assemble_on

torch = pytest.importorskip("torch")

Z = 5.0

KERNEL = dict(
    name="device-draws-kernel",
    kind="kernel",
    trials=1500,
    chunk_trials=500,
    seed=20261126,
    data={"source": "pairs", "n_pairs": 12, "norm_x": 0.5, "norm_y": 0.5},
    grid={"dim": [8], "n_features": [8, 24]},
    metrics=["mse", "rel_mse"],
    estimators=[
        {"label": "trig", "map": "Trig"},
        {"label": "positive-orthogonal", "map": "Positive", "projection": "orthogonal"},
        {"label": "hyperbolic-qmc", "map": "Hyperbolic", "projection": "qmc"},
        {"label": "positive-structured", "map": "Positive", "projection": "structured"},
        {"label": "positive-simplex", "map": "Positive", "projection": "simplex"},
        {"label": "oprf", "map": "OPRF", "A": 0.05},
        {"label": "sderf", "map": "SDERF"},  # no device draws: NumPy, listed in the provenance
    ],
)

ATTENTION = dict(
    name="device-draws-attention",
    kind="attention",
    trials=300,
    chunk_trials=150,
    seed=11,
    metrics=["mse"],
    data={"source": "sequence", "n_tokens": 16, "dim": 4, "d_v": 3, "scale": 0.6},
    grid={"feature_dim": [16]},
    estimators=[
        {"label": "favor+", "estimator": "RFA", "map": "Positive", "projection": "orthogonal"},
        {"label": "favor+causal", "estimator": "RFA", "map": "Positive", "causal": True},
        {"label": "snis", "estimator": "SNIS", "proposal": "chunk-mean"},
        {"label": "lara", "estimator": "LARA", "weights": "balance", "samples_per_proposal": 4},
        {"label": "ra", "estimator": "RA"},
        {"label": "ra-causal", "estimator": "RA", "causal": True},
        {"label": "hybrid", "estimator": "Hybrid", "map": "Positive", "window": 2, "n_global": 1},
    ],
)


def _z(a: st.StudyResult, b: st.StudyResult, metric: str) -> np.ndarray:
    sa, sb = a.summary(), b.summary()
    keys = ["cell", "estimator"]
    m = sa[sa.metric == metric].merge(sb[sb.metric == metric], on=keys, suffixes=("_a", "_b"))
    assert len(m) == len(sa[sa.metric == metric]) > 0
    return ((m.estimate_a - m.estimate_b) / np.sqrt(m.mcse_a**2 + m.mcse_b**2)).to_numpy()


@pytest.fixture(scope="module")
def kernel_runs():
    d = st.Design(**KERNEL)
    numpy_run = st.run(d, progress=False)
    device_run = st.run(d, backend="torch", device="cpu", draws="backend", progress=False)
    return d, numpy_run, device_run


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["mse", "rel_mse"])
def test_kernel_draws_on_the_backend_are_statistically_equivalent(kernel_runs, metric):
    _, numpy_run, device_run = kernel_runs
    z = _z(device_run, numpy_run, metric)
    assert np.all(np.abs(z) <= Z), z

    # and they are other numbers: the trials differ where the map draws on the device
    def sq_err(res: st.StudyResult, label: str) -> np.ndarray:
        t = res.trials
        return t[(t.cell == 0) & (t.estimator == label)].sort_values("trial")["sq_err"].to_numpy()

    assert not np.allclose(sq_err(numpy_run, "trig"), sq_err(device_run, "trig"))
    np.testing.assert_allclose(sq_err(numpy_run, "sderf"), sq_err(device_run, "sderf"), rtol=1e-9)


@pytest.mark.slow
def test_kernel_device_draws_provenance(kernel_runs):
    _, _, device_run = kernel_runs
    assert device_run.provenance["draws"] == "backend"
    assert device_run.provenance["numpy_draws"] == ["sderf"]


@pytest.mark.slow
def test_device_draws_are_reproducible_and_do_not_depend_on_workers():
    d = st.Design(**{**KERNEL, "trials": 40, "chunk_trials": 20})
    a = st.run(d, draws="backend", progress=False)  # NumPy's own generator, per work unit
    b = st.run(d, draws="backend", executor="processes", workers=2, progress=False)
    assert a.trials.equals(b.trials)
    c = st.run(d, backend="torch", device="cpu", draws="backend", progress=False)
    e = st.run(d, backend="torch", device="cpu", draws="backend", progress=False)
    assert c.trials.equals(e.trials)
    assert not c.trials["sq_err"].equals(a.trials["sq_err"])  # another library, other numbers


@pytest.mark.slow
def test_attention_draws_on_the_backend_are_statistically_equivalent():
    d = st.Design(**ATTENTION)
    a = st.run(d, progress=False)
    b = st.run(d, backend="torch", device="cpu", draws="backend", progress=False)
    z = _z(b, a, "mse")
    assert np.all(np.abs(z) <= Z), z
    assert b.provenance["numpy_draws"] == ["hybrid"]  # RFA and the sampled estimators draw on the device

    def trial_mse(res: st.StudyResult, label: str) -> np.ndarray:
        t = res.trials
        return t[t.estimator == label].sort_values(["cell", "trial"])["sq_err"].to_numpy()

    for label in ("snis", "lara", "ra", "ra-causal"):  # other numbers than NumPy's
        assert not np.allclose(trial_mse(a, label), trial_mse(b, label)), label
    np.testing.assert_allclose(trial_mse(a, "hybrid"), trial_mse(b, "hybrid"), rtol=1e-9)


def test_sampled_estimators_draw_per_trial_from_the_trials_seed():
    """RA, SNIS and LARA with draws = "backend" draw each trial from the backend's generator seeded with the
    trial's stream: on NumPy the very numbers of draws = "numpy" (whatever the stacking of trials); on
    PyTorch reproducible, and the same for any chunk_trials."""
    d = st.Design(**{**ATTENTION, "trials": 12, "chunk_trials": 6})
    a = st.run(d, progress=False)
    b = st.run(d, draws="backend", progress=False)
    sampled = a.trials.estimator.isin(["snis", "lara", "ra", "ra-causal"])
    np.testing.assert_allclose(a.trials[sampled]["sq_err"], b.trials[sampled]["sq_err"], rtol=1e-12)
    c = st.run(d, backend="torch", device="cpu", draws="backend", progress=False)
    d4 = st.Design(**{**ATTENTION, "trials": 12, "chunk_trials": 4})
    e = st.run(d4, backend="torch", device="cpu", draws="backend", progress=False)
    np.testing.assert_allclose(c.trials[sampled]["sq_err"], e.trials[sampled]["sq_err"], rtol=1e-12)
    assert not np.allclose(c.trials[sampled]["sq_err"], a.trials[sampled]["sq_err"])


def test_trial_streams_on_a_device_are_checked():
    from rfkit._random import TrialStreams
    from rfkit.exceptions import BackendError

    gen = BackendGenerator(backend_for("torch", "cpu"), np.random.SeedSequence(1))
    with pytest.raises(InvalidParameterError, match="not a mix"):
        TrialStreams((gen, np.random.default_rng(0)))
    assert TrialStreams((gen,)).on_device and not TrialStreams((np.random.default_rng(0),)).on_device
    Q = np.zeros((1, 4, 2))
    for est in (rk.attention.RA(n_samples=2), rk.attention.SNIS(n_samples=4)):
        with pytest.raises(BackendError, match="torch"):
            est(Q, Q, Q, rng=TrialStreams((gen,)))


def test_device_draws_are_part_of_the_runs_identity(tmp_path):
    d = st.Design(**{**KERNEL, "trials": 10, "chunk_trials": 10, "estimators": KERNEL["estimators"][:1]})
    assert d.hash() != d.on_backend(draws="backend").hash()
    assert d.hash() == d.on_backend(draws="numpy").hash()
    st.run(d, out=tmp_path / "o", progress=False)
    with pytest.raises(StudyError, match="cannot resume"):
        st.run(d, out=tmp_path / "o", resume=True, draws="backend", progress=False)


def test_draws_are_validated():
    with pytest.raises(InvalidParameterError, match=r"`draws` must be one of \['numpy', 'backend'\]"):
        st.Design(**{**KERNEL, "draws": "gpu"})
    with pytest.raises(InvalidParameterError, match="array_api_strict"):
        st.Design(**{**KERNEL, "draws": "backend", "backend": "array_api_strict"})


@pytest.mark.parametrize("kind", P.PROJECTIONS)
def test_device_assembly_equals_numpys_for_the_same_random_numbers(kind):
    bk = backend_for("torch", "cpu")
    for m, d in [(5, 4), (16, 16), (40, 16), (7, 8), (5, 96), (101, 96)]:  # d = 96: reduced partial block
        ing = P._ingredients(kind, np.random.default_rng(3), 4, m, d, 3)
        host = P._assemble(kind, {k: v.copy() for k, v in ing.items()}, m, d)
        dev = assemble_on(bk, kind, {k: torch.as_tensor(v) for k, v in ing.items()}, m, d)
        np.testing.assert_allclose(dev.numpy(), host, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", P.PROJECTIONS)
def test_sample_projection_on_is_reproducible_and_on_the_device(kind):
    bk = backend_for("torch", "cpu")
    a = P.sample_projection_on(kind, 20, 8, BackendGenerator(bk, np.random.SeedSequence(4)), n_draws=3)
    b = P.sample_projection_on(kind, 20, 8, BackendGenerator(bk, np.random.SeedSequence(4)), n_draws=3)
    c = P.sample_projection_on(kind, 20, 8, BackendGenerator(bk, np.random.SeedSequence(5)), n_draws=3)
    assert isinstance(a, torch.Tensor) and a.shape == (3, 20, 8) and a.dtype == torch.float64
    assert torch.equal(a, b) and not torch.equal(a, c)
    one = P.sample_projection_on(kind, 20, 8, BackendGenerator(bk, np.random.SeedSequence(4)))
    assert one.shape == (20, 8)
    with pytest.raises(InvalidParameterError, match="BackendGenerator"):
        P.sample_projection_on(kind, 20, 8, np.random.default_rng(0))


def test_backend_generator_distributions():
    """Moments of the device numbers within 5 standard errors (chi-square: a sum of squared normals)."""
    g = BackendGenerator(backend_for("torch", "cpu"), np.random.SeedSequence(9))
    n = 200_000
    z = g.standard_normal((n,)).numpy()
    assert abs(z.mean()) <= Z / np.sqrt(n) and abs(z.var() - 1) <= Z * np.sqrt(2 / n)
    c = g.chisquare(7, (n,)).numpy()
    assert abs(c.mean() - 7) <= Z * np.sqrt(14 / n) and abs(c.var() - 14) <= Z * np.sqrt(
        (96 * 7 + 2 * 14**2) / n
    )
    u = g.random((n,)).numpy()
    assert u.dtype == np.float64 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) <= Z * np.sqrt(1 / 12 / n) and abs(u.var() - 1 / 12) <= Z * np.sqrt(
        1 / 180 / n
    )
    k = g.integers(1 << 52, (n,)).numpy()
    assert k.min() >= 0 and k.max() < 1 << 52 and abs(k.mean() / 2**52 - 0.5) <= Z * np.sqrt(1 / 12 / n)
    with pytest.raises(InvalidParameterError, match="array_api_strict"):
        BackendGenerator(backend_for("array_api_strict"), np.random.SeedSequence(0))
    with pytest.raises(InvalidParameterError, match="SeedSequence"):
        BackendGenerator(backend_for("torch", "cpu"), 3)


def test_rfa_runs_on_device_directions():
    """A draw built around device directions gives RFA's output on that device, equal to the same
    directions on the host."""
    bk = backend_for("torch", "cpu")
    fm = rk.features.Positive(16, projection="orthogonal")
    W = fm.projection_on(4, None, BackendGenerator(bk, np.random.SeedSequence(1)))
    rng = np.random.default_rng(2)
    Q, K, V = (0.5 * rng.standard_normal((2, 12, 4)) for _ in range(3))
    dev = rk.attention.RFA(fm)(*(torch.as_tensor(a) for a in (Q, K, V)), draw=fm.from_projection(4, None, W))
    host = rk.attention.RFA(fm)(Q, K, V, draw=fm.from_projection(4, None, W.numpy()))
    np.testing.assert_allclose(dev.output.numpy(), host.output, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="NumPy only"):
        rk.features.SDERF(8).projection_on(4, None, BackendGenerator(bk, np.random.SeedSequence(1)))


CUDA = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (GPU tests run on a GPU machine)"
)


@CUDA
@pytest.mark.parametrize("kind", P.PROJECTIONS)
def test_cuda_assembly_equals_numpys_for_the_same_random_numbers(kind):
    bk = backend_for("torch", "cuda")
    ing = P._ingredients(kind, np.random.default_rng(3), 4, 40, 16, 3)
    host = P._assemble(kind, {k: v.copy() for k, v in ing.items()}, 40, 16)
    dev = assemble_on(bk, kind, {k: torch.as_tensor(v, device="cuda") for k, v in ing.items()}, 40, 16)
    assert dev.device.type == "cuda"
    np.testing.assert_allclose(dev.cpu().numpy(), host, rtol=0, atol=1e-10)
    g = BackendGenerator(bk, np.random.SeedSequence(4))
    W = P.sample_projection_on(kind, 40, 16, g, n_draws=3)
    assert W.device.type == "cuda" and W.shape == (3, 40, 16)


@CUDA
def test_cuda_draws_are_statistically_equivalent_to_numpys():
    d = st.Design(**{**KERNEL, "trials": 600, "chunk_trials": 300})
    a = st.run(d, progress=False)
    b = st.run(d, backend="torch", device="cuda", draws="backend", progress=False)
    c = st.run(d, backend="torch", device="cuda", draws="backend", progress=False)
    z = _z(b, a, "mse")
    assert np.all(np.abs(z) <= Z), z
    assert b.trials.equals(c.trials)  # reproducible on the device
    assert b.provenance["device"].startswith("cuda") and b.provenance["draws"] == "backend"
