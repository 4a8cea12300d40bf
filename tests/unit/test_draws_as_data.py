"""Draws as data: ``np.asarray`` of scaled features, saving and loading draws, short reprs.

* ``np.asarray(Features)`` is the dense matrix exp(log_scale) * values (NumPy 2's ``__array__``
  protocol), refused with a named error where it overflows float64 or where the features hold
  arrays of another library;
* ``draw.save(path)`` / ``rk.features.load_draw(path)``: a bit-exact round trip for every map of
  the registry (data-dependent ones after fitting), single and batched draws; files of another
  format version and files that are not rfkit draws are refused with a named error; no pickle;
* reprs name the map with its parameters, ``dim`` and ``n_draws``, and never dump arrays.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import BackendError, DrawFormatError, InvalidParameterError, NumericalOverflowError

F = rk.features
_R = np.random.default_rng(20261128)
D = 5
X = 0.4 * _R.standard_normal((6, D))
Y = 0.4 * _R.standard_normal((7, D))
Q_FIT = 0.3 * _R.standard_normal((40, D))
K_FIT = 0.3 * _R.standard_normal((40, D))

#: one instance of every map of rk.features' registry (the data-dependent ones fitted below)
MAPS = {
    "Trig": F.Trig(8, projection="orthogonal"),
    "Positive": F.Positive(8, projection="qmc"),
    "Hyperbolic": F.Hyperbolic(8, projection="structured"),
    "CEXP": F.CEXP(8, A="mean"),
    "HCEXP": F.HCEXP(8, A="variance"),
    "OPRF": F.OPRF(8, hyperbolic=True),
    "GERF": F.GERF(8, s=-1),
    "SADERF": F.SADERF(8),
    "Taylor": F.Taylor(degree=3),
    "Limit": F.Limit(n=2),
    "ADERF": F.ADERF(8),
    "SDERF": F.SDERF(8),
    "RandomMaclaurin": F.RandomMaclaurin(8),
    "TensorSketch": F.TensorSketch(4, degree=2),
}


def _fitted(name: str) -> F.FeatureMap:
    fm = MAPS[name]
    return fm.fit(Q_FIT, K_FIT) if fm.needs_data else fm


def test_every_registered_map_is_covered():
    import rfkit.study as st

    assert set(MAPS) == set(st.FEATURE_MAPS)


# ----------------------------------------------------------------------------- np.asarray
def test_asarray_is_the_dense_features():
    draw = F.Positive(16).sample(D, rng=1)
    f = draw.queries(X)
    a = np.asarray(f)
    assert isinstance(a, np.ndarray) and a.shape == (6, 16) and a.dtype == np.float64
    np.testing.assert_array_equal(a, np.exp(f.log_scale)[:, None] * f.values)
    np.testing.assert_array_equal(a, f.dense())
    assert np.asarray(f, dtype=np.float32).dtype == np.float32
    np.testing.assert_allclose(np.array(f) @ np.asarray(draw.keys(Y)).T, draw.kernel(X, Y), rtol=1e-12)


def test_asarray_of_batched_signed_features():
    f = F.Trig(4).sample(D, rng=2, n_draws=3).keys(Y)
    np.testing.assert_array_equal(np.asarray(f), f.dense())
    assert np.asarray(f).shape == (3, 7, 8)


def test_asarray_copies_and_refuses_copy_false():
    f = F.Positive(4).sample(D, rng=0).queries(X)
    np.testing.assert_array_equal(np.asarray(f, copy=True), f.dense())
    with pytest.raises(ValueError, match=r"copy=False"):
        np.asarray(f, copy=False)


def test_asarray_refuses_overflow():
    f = F.Features(values=np.ones((2, 3)), log_scale=np.array([0.0, 800.0]))
    with pytest.raises(NumericalOverflowError) as err:
        np.asarray(f)
    msg = str(err.value)
    assert "np.asarray" in msg and "800" in msg and "values" in msg and "log_scale" in msg


def test_asarray_refuses_other_libraries():
    torch = pytest.importorskip("torch")
    f = F.Positive(4).sample(D, rng=0).queries(torch.as_tensor(X))
    assert isinstance(f.values, torch.Tensor)
    with pytest.raises(BackendError) as err:
        np.asarray(f)
    msg = str(err.value)
    assert "torch" in msg and "dense()" in msg and ".cpu().numpy()" in msg


# ----------------------------------------------------------------------------- save / load
def _same_draw(a: F.FeatureDraw, b: F.FeatureDraw) -> None:
    assert type(a) is type(b) and a.dim == b.dim and a.n_draws == b.n_draws
    assert type(a.spec) is type(b.spec)
    for side in ("queries", "keys"):
        fa, fb = getattr(a, side)(X), getattr(b, side)(X)
        np.testing.assert_array_equal(fa.values, fb.values, strict=True)
        np.testing.assert_array_equal(fa.log_scale, fb.log_scale, strict=True)
    np.testing.assert_array_equal(a.kernel(X, Y), b.kernel(X, Y), strict=True)
    np.testing.assert_array_equal(a.log_kernel(X, Y), b.log_kernel(X, Y), strict=True)
    np.testing.assert_array_equal(a.pairwise(X, Y[:6]), b.pairwise(X, Y[:6]), strict=True)


@pytest.mark.parametrize("n_draws", [None, 3])
@pytest.mark.parametrize("name", sorted(MAPS))
def test_round_trip_is_exact(name, n_draws, tmp_path):
    draw = _fitted(name).sample(D, rng=7, n_draws=n_draws)
    path = tmp_path / f"{name}.npz"
    assert draw.save(path) == path
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    loaded = F.load_draw(path)
    _same_draw(draw, loaded)
    assert repr(loaded) == repr(draw)


def test_round_trip_of_sample_streams(tmp_path):
    fm = F.CEXP(6, A="variance").fit(Q_FIT, K_FIT)
    draw = fm.sample_streams(D, [np.random.SeedSequence(3, spawn_key=(0, t)) for t in range(2)])
    _same_draw(draw, F.load_draw(draw.save(tmp_path / "s.npz")))


def test_file_holds_arrays_and_json_metadata_without_pickle(tmp_path):
    fm = F.SDERF(8).fit(Q_FIT, K_FIT)
    path = fm.sample(D, rng=0, n_draws=2).save(tmp_path / "d.npz")
    with np.load(path, allow_pickle=False) as z:
        names = set(z.files)
        meta = json.loads(str(z["metadata"]))
        assert all(z[k].dtype != object for k in names)
    assert meta["format"] == "rfkit.draw" and meta["format_version"] == 1
    assert meta["rfkit_version"] == rk.__version__
    assert meta["map"]["class"] == "rfkit.features:SDERF"
    assert meta["map"]["params"]["n_features"] == 8 and meta["map"]["params"]["projection"] == "iid"
    assert meta["dim"] == D and meta["n_draws"] == 2 and meta["draw"] == "SDERFDraw"
    assert {"metadata", "projection", "map.A"} <= names


def test_save_overwrites_atomically(tmp_path):
    path = tmp_path / "d.npz"
    F.Positive(4).sample(D, rng=0).save(path)
    second = F.Positive(4).sample(D, rng=1)
    second.save(path)
    _same_draw(second, F.load_draw(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz"]


def _rewrite(path: Path, **changes: object) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["metadata"]))
    meta.update(changes)
    arrays["metadata"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


def test_other_format_version_is_refused(tmp_path):
    path = F.Positive(4).sample(D, rng=0).save(tmp_path / "d.npz")
    _rewrite(path, format_version=99)
    with pytest.raises(DrawFormatError) as err:
        F.load_draw(path)
    msg = str(err.value)
    assert "format version 99" in msg and "version 1" in msg and "d.npz" in msg


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda p: p.write_bytes(pickle.dumps(F.Positive(4).sample(D, rng=0))), id="pickle"),
        pytest.param(lambda p: p.write_text("hello"), id="text"),
        pytest.param(lambda p: np.savez(p, x=np.ones(3)), id="npz-without-metadata"),
        pytest.param(lambda p: np.savez(p, metadata=np.array("{not json")), id="bad-json"),
        pytest.param(lambda p: np.savez(p, metadata=np.array('{"format": "other"}')), id="other-format"),
        pytest.param(lambda p: zipfile.ZipFile(p, "w").close(), id="empty-zip"),
    ],
)
def test_file_that_is_not_an_rfkit_draw_is_refused(write, tmp_path):
    path = tmp_path / "x.npz"
    write(path)
    with pytest.raises(DrawFormatError) as err:
        F.load_draw(path)
    assert "x.npz" in str(err.value) and "not an rfkit draw" in str(err.value)


def test_metadata_naming_a_non_map_is_refused(tmp_path):
    path = F.Positive(4).sample(D, rng=0).save(tmp_path / "d.npz")
    _rewrite(path, map={"class": "os:system", "params": {}})
    with pytest.raises(DrawFormatError) as err:
        F.load_draw(path)
    assert "os:system" in str(err.value)


def test_missing_array_is_refused(tmp_path):
    path = F.Trig(4).sample(D, rng=0).save(tmp_path / "d.npz")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "projection"}
    np.savez(path, **arrays)
    with pytest.raises(DrawFormatError, match="projection"):
        F.load_draw(path)


def test_draw_of_a_sample_one_map_cannot_be_saved(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "studies" / "examples"))
    from rescaled import RescaledPositive

    draw = RescaledPositive(4).sample(D, rng=0)
    with pytest.raises(InvalidParameterError) as err:
        draw.save(tmp_path / "d.npz")
    assert "RescaledPositive" in str(err.value) and "sample_one" in str(err.value)
    assert not list(tmp_path.iterdir())


def test_load_missing_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        F.load_draw(tmp_path / "nope.npz")


# ----------------------------------------------------------------------------- reprs
def test_draw_repr_names_map_dim_and_n_draws():
    draw = F.Positive(n_features=64, projection="orthogonal").sample(16, rng=0, n_draws=1)
    assert repr(draw) == "ExpDraw(map=Positive(n_features=64, projection='orthogonal'), dim=16, n_draws=1)"
    assert (
        repr(F.Taylor(degree=2).sample(3))
        == "MonomialDraw(map=Taylor(degree=2, form='symmetric'), dim=3, n_draws=None)"
    )


def test_draw_repr_abbreviates_array_parameters():
    fm = F.ADERF(8).fit(Q_FIT, K_FIT)
    r = repr(fm.sample(D, rng=0))
    assert r == (
        f"ExpDraw(map=ADERF(n_features=8, A={fm.A!r}, G=array(shape=(5, 5), dtype=float64), "
        f"projection='iid', fit_pairs='all'), dim={D}, n_draws=None)"
    )
    assert "\n" not in r and len(r) < 200


def test_fitted_map_repr_shows_arrays_by_shape():
    """A fitted map (an array-valued A, G or psi) prints its arrays by shape and dtype, as its draw does."""
    for fm in (
        F.CEXP(8, A="variance").fit(Q_FIT, K_FIT),
        F.HCEXP(8, A="variance").fit(Q_FIT, K_FIT),
        F.ADERF(8).fit(Q_FIT, K_FIT),
        F.SDERF(8).fit(Q_FIT, K_FIT),
        F.SADERF(8).fit(Q_FIT, K_FIT),
    ):
        r = repr(fm)
        assert "array(shape=" in r and "array([" not in r and "\n" not in r, r
        assert r in repr(fm.sample(D, rng=0))

    class Plain(F.FeatureMap):  # a map of your own that is not a dataclass keeps object's repr
        def feature_dim(self, dim):
            return 1

    assert repr(Plain()).startswith("<") and "Plain object at" in repr(Plain())
    assert repr(F.CEXP(8, A="variance").fit(Q_FIT, K_FIT)) == (
        "CEXP(n_features=8, A=array(shape=(5,), dtype=float64), projection='iid', fit_pairs='all')"
    )


def test_features_repr_is_short():
    f = F.Positive(64).sample(D, rng=0, n_draws=2).queries(X)
    assert (
        repr(f)
        == "Features(values=array(shape=(2, 6, 64), dtype=float64), log_scale=array(shape=(2, 6), dtype=float64))"
    )


def test_features_repr_names_other_libraries():
    torch = pytest.importorskip("torch")
    f = F.Positive(4).sample(D, rng=0).queries(torch.as_tensor(X, dtype=torch.float32))
    assert repr(f) == (
        "Features(values=torch.Tensor(shape=(6, 4), dtype=float32, device=cpu), "
        "log_scale=torch.Tensor(shape=(6,), dtype=float32, device=cpu))"
    )
