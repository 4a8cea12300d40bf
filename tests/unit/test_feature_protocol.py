"""The feature-map extension protocol: the batching fallback, the protocol check on every
built-in map and on maps of your own, bad maps with clear errors, and rk.theory.check on user maps."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import InvalidParameterError

EXAMPLES = Path(__file__).resolve().parents[2] / "studies" / "examples"
sys.path.insert(0, str(EXAMPLES))
from rescaled import RescaledPositive  # noqa: E402  (the example map of studies/examples)

F = rk.features

#: one instance of every concrete map of rk.features (their protocol is the users' protocol)
BUILTIN = {
    "Trig": F.Trig(8, projection="orthogonal"),
    "Positive": F.Positive(8, projection="simplex"),
    "Hyperbolic": F.Hyperbolic(8),
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


def test_every_builtin_map_is_covered():
    import rfkit.study as st

    assert set(BUILTIN) == set(st.FEATURE_MAPS)


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_builtin_maps_follow_the_protocol(name):
    F.check_feature_map(BUILTIN[name], dim=5)


# ----------------------------------------------------------------------------- the fallback
X = 0.3 * np.random.default_rng(8804415573312).standard_normal((4, 6))
Y = 0.2 * np.random.default_rng(1190385512093).standard_normal((4, 6))


def test_user_map_follows_the_protocol_and_batches_by_stacking():
    fm = RescaledPositive(16, scale=0.6)
    F.check_feature_map(fm, dim=6)
    batch = fm.sample(6, rng=123, n_draws=3)
    assert isinstance(batch, F.StackedDraw) and batch.n_draws == 3
    children = np.random.default_rng(123).spawn(3)  # the documented fallback: T child streams
    for t, child in enumerate(children):
        one = fm.sample(6, rng=child)
        np.testing.assert_array_equal(batch.queries(X).values[t], one.queries(X).values)
        np.testing.assert_array_equal(batch.pairwise(X, Y)[t], one.pairwise(X, Y))
        np.testing.assert_allclose(batch.kernel(X, Y)[t], one.kernel(X, Y), rtol=1e-13)
    streams = [np.random.SeedSequence(5, spawn_key=(0, t)) for t in range(4)]
    ss = fm.sample_streams(6, streams)
    for t in (0, 3):  # draw t depends on stream t alone
        alone = fm.sample(6, rng=np.random.SeedSequence(5, spawn_key=(0, t)))
        np.testing.assert_array_equal(ss.log_pairwise(X, Y)[t], alone.log_pairwise(X, Y))
    g = np.random.default_rng(9)
    a, b = fm.sample(6, rng=g).pairwise(X, Y), fm.sample(6, rng=g).pairwise(X, Y)
    assert not np.array_equal(a, b)  # a Generator passed twice gives new draws


def test_user_map_closed_form_pinned_and_equal_to_cexp():
    fm = RescaledPositive(7, scale=0.5, wiggle=0.3)
    x = np.array([0.3, -0.2, 0.1])
    y = np.array([-0.1, 0.4, 0.25])
    # mpmath, 30 digits:
    #   s = [0.5*exp(0.3*sin(1.7*i + 0.4)) for i in range(3)]; z = [s_i x_i + y_i / s_i]
    #   exp(2 x.y) * expm1(sum z_i^2) / 7
    assert float(fm.mse(x, y)) == pytest.approx(0.110524140212195547477619165452, rel=1e-12)
    s = fm.scales(3)
    np.testing.assert_allclose(
        fm.mse(X[:, :3], Y[:, :3]), rk.theory.mse(F.CEXP(7, A=s), X[:, :3], Y[:, :3]), rtol=1e-12
    )


@pytest.mark.parametrize(
    "m, scale, seed", [(4, 0.5, 6101392833150014), (16, 0.8, 2267741098330121), (8, 1.3, 7730416692050831)]
)
def test_theory_check_compares_a_user_mse_with_simulation(m, scale, seed):
    fm = RescaledPositive(m, scale=scale)
    x, y = 0.5 * X, 0.5 * Y  # moderate norms: light-tailed squared errors, reliable MCSE
    res = rk.theory.check(fm, x, y, n_trials=4000, rng=seed)
    assert res.prediction == "fm.mse"
    np.testing.assert_allclose(res.predicted_mse, fm.mse(x, y))
    assert np.all(np.abs(res.z) <= 5), res.z  # |measured - predicted| <= 5 MCSE, 4000 trials
    assert np.all(np.isnan(res.bias_z))  # the map has no bias(x, y): no prediction
    assert np.all(np.abs(res.measured_bias) <= 5 * res.bias_se)  # unbiased


class NoTheory(RescaledPositive):
    """The example map without its closed form: the check is simulation only."""

    mse = None  # type: ignore[assignment]


def test_theory_check_simulation_only_bias_variance_mse():
    fm = NoTheory(8, scale=0.7)
    res = rk.theory.check(fm, 0.5 * X, 0.5 * Y, n_trials=6000, rng=3355079101874471)
    assert res.prediction == "none"
    assert np.isnan(res.predicted_mse).all() and np.isnan(res.z).all()
    truth = RescaledPositive(8, scale=0.7).mse(0.5 * X, 0.5 * Y)  # = the variance: unbiased
    assert np.all(np.abs(res.measured_variance - truth) <= 5 * res.variance_mcse)
    assert np.all(np.abs(res.measured_mse - truth) <= 5 * res.mse_mcse)
    assert np.all(res.variance_mcse > 0) and np.all(res.variance_mcse < res.measured_variance)
    frame = res.to_frame()
    assert {"measured_variance", "variance_mcse", "prediction"} <= set(frame.columns)
    with pytest.raises(InvalidParameterError, match="no closed-form MSE .*NoTheory"):
        rk.theory.check(fm, X, Y, n_trials=10, rng=0, require_prediction=True)


# ----------------------------------------------------------------------------- bad maps
@dataclasses.dataclass(frozen=True)
class _Base(F.FeatureMap):
    n_features: int = 4

    def feature_dim(self, dim):
        return self.n_features

    def sample_one(self, dim, *, rng):
        return _Draw(self, dim, rng.standard_normal((self.n_features, dim)))


class _Draw(F.FeatureDraw):
    def __init__(self, spec, dim, W):
        super().__init__(spec, dim)
        self.W = W

    def _log_features(self, X, side):
        return None, X @ self.W.T - 0.5 * np.sum(X * X, -1, keepdims=True) - 0.5 * np.log(len(self.W))


class BareArray(_Base):
    def sample_one(self, dim, *, rng):
        class D(_Draw):
            def _features(self, X, side):
                return np.exp(self._log_features(X, side)[1])

        return D(self, dim, rng.standard_normal((self.n_features, dim)))


class WrongWidth(_Base):
    def feature_dim(self, dim):
        return 2 * self.n_features


class IgnoresRng(_Base):
    def sample_one(self, dim, *, rng):
        return super().sample_one(dim, rng=np.random.default_rng(0))


class GlobalRandom(_Base):
    def sample_one(self, dim, *, rng):
        return _Draw(self, dim, np.random.standard_normal((self.n_features, dim)))  # noqa: NPY002


class NotADraw(_Base):
    def sample_one(self, dim, *, rng):
        return rng.standard_normal((self.n_features, dim))


class Unscaled(_Base):
    def sample_one(self, dim, *, rng):
        class D(_Draw):
            def _features(self, X, side):
                return F.Features(
                    values=10.0 * np.exp(self._log_features(X, side)[1]), log_scale=np.zeros(len(X))
                )

        return D(self, dim, rng.standard_normal((self.n_features, dim)))


class ChunkDependent(_Base):
    def _sample_many(self, dim, rngs):  # draw t uses the first stream: depends on the others
        return F.StackedDraw(
            self,
            dim,
            [self.sample_one(dim, rng=np.random.default_rng(rngs[0].bit_generator.seed_seq)) for _ in rngs],
        )


class NoHook(F.FeatureMap):
    def feature_dim(self, dim):
        return 4


@pytest.mark.parametrize(
    "fm, rule, received",
    [
        (BareArray(), "must return rk.features.Features(values, log_scale)", "Got ndarray of shape (3, 4)"),
        (WrongWidth(), "must have shape (3, 8) (feature_dim(d) = 8 columns)", "Got shape (3, 4)"),
        (
            IgnoresRng(),
            "must use `rng`: two different seeds must give different features",
            "identical features",
        ),
        (GlobalRandom(), "the same seed must give the same features", "different features"),
        (NotADraw(), "sample_one(dim, *, rng) must return one rk.features.FeatureDraw", "Got ndarray"),
        (Unscaled(), "|values| <= 1", "Got max |values| ="),
        (ChunkDependent(), "must depend on rngs[t] alone", "different features for the same stream"),
        (NoHook(), "implements neither the extension hook sample_one", "NotImplementedError"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 3 else None,
)
def test_bad_maps_get_errors_naming_class_rule_and_value(fm, rule, received):
    name = type(fm).__qualname__
    with pytest.raises(InvalidParameterError) as info:
        F.check_feature_map(fm, dim=4)
    msg = str(info.value)
    assert name in msg and rule in msg and received in msg, msg
    with pytest.raises(InvalidParameterError, match=re.escape(name)):
        rk.theory.check(fm, X[:, :4], Y[:, :4], n_trials=20, rng=0)


def test_not_a_feature_map():
    with pytest.raises(
        InvalidParameterError, match=r"must be an rk.features.FeatureMap .*Got str 'Positive'"
    ):
        F.check_feature_map("Positive", dim=3)
    with pytest.raises(InvalidParameterError, match="`dim` parameter of check_feature_map"):
        F.check_feature_map(F.Positive(4), dim=0)


def test_import_rfkit_loads_neither_pandas_nor_matplotlib():
    code = (
        "import sys, rfkit as rk; rk.features.check_feature_map(rk.features.Positive(4), dim=3); "
        "print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- the public draw protocol
EXP_FORM_MAPS = [
    F.Positive(8),
    F.Hyperbolic(8),
    F.CEXP(8, A=np.array([1.0, 0.5, 2.0])),
    F.HCEXP(8, A=np.array([[1.0, 0.2, 0.0], [0.0, 1.0, 0.1], [0.0, 0.0, 0.5]])),
    F.OPRF(8, A=-0.05),
    F.GERF(8, A=-0.05),
]
NO_EXP_FORM_MAPS = [
    F.Trig(8),
    F.GERF(8, A=-0.05, s=-1),
    F.Taylor(2),
    F.RandomMaclaurin(8),
    F.SDERF(8, A=0.05),
]


@pytest.mark.parametrize("fm", EXP_FORM_MAPS, ids=lambda f: f.name)
@pytest.mark.parametrize("n_draws", [None, 3])
def test_exp_form_gives_the_draws_features(fm, n_draws):
    """log phi_k(x) = W_k.u + e_k + c - |u|^2/2 with u = transform(x, side), for both sides."""
    draw = fm.sample(3, rng=1, n_draws=n_draws)
    form = draw.exp_form()
    assert isinstance(form, F.ExpForm)
    X = 0.4 * np.random.default_rng(2).standard_normal((5, 3))
    for side in ("query", "key"):
        U = form.transform(X, side)
        # (5, D), or (T, 5, D) for T draws
        logphi = U @ np.swapaxes(form.W, -1, -2) + form.constant - 0.5 * np.sum(U * U, axis=-1)[..., None]
        if form.offsets is not None:
            logphi = logphi + (form.offsets if n_draws is None else form.offsets[:, None, :])
        f = draw.features(X, side)
        np.testing.assert_allclose(np.exp(f.log_scale)[..., None] * f.values, np.exp(logphi), rtol=1e-12)
        sign, logabs = draw.log_features(X, side)
        assert sign is None
        np.testing.assert_allclose(logabs, logphi, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fm", NO_EXP_FORM_MAPS, ids=lambda f: f.name)
def test_maps_without_exponential_form_say_so_and_expose_features(fm):
    draw = fm.sample(3, rng=1)
    assert draw.exp_form() is None
    X = 0.4 * np.random.default_rng(2).standard_normal((5, 3))
    a, b = draw.features(X, "query"), draw.queries(X)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.log_scale, b.log_scale)


def test_param_on_caches_per_backend_and_dtype():
    draw = F.Positive(4).sample(3, rng=0)
    bk = rk._backend.get_backend(("X", np.zeros((1, 3))))
    W = np.arange(12.0).reshape(4, 3)
    a = draw.param_on(bk, "mine_W", W, np.float32)
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a, W.astype(np.float32))
    np.testing.assert_array_equal(draw.param(key="mine_W", value=W, like=np.zeros((1, 3))), W)


def test_rfa_uses_the_public_protocol_for_a_user_map_with_an_exp_form():
    """A map of your own that returns an ExpForm takes RFA's fast path and gives its generic result."""

    class ScaledDraw(rk.features.FeatureDraw):
        def __init__(self, spec, dim, W):
            super().__init__(spec, dim)
            self.W = W

        def _log_features(self, X, side):
            m = self.W.shape[0]
            return None, X @ self.W.T - 0.5 * np.sum(X * X, axis=-1)[..., None] - 0.5 * np.log(m)

        def exp_form(self):
            return F.ExpForm(
                W=self.W, offsets=None, constant=-0.5 * np.log(self.W.shape[0]), transform=lambda X, s: X
            )

    @dataclasses.dataclass(frozen=True)
    class MyPositive(rk.features.FeatureMap):
        n_features: int = 16

        def feature_dim(self, dim):
            return self.n_features

        def sample_one(self, dim, *, rng):
            return ScaledDraw(self, dim, rng.standard_normal((self.n_features, dim)))

    Q, K, V = 0.3 * np.random.default_rng(0).standard_normal((3, 6, 3))
    draw = MyPositive().sample(3, rng=4)
    fast = rk.attention.RFA(MyPositive())(Q, K, V, draw=draw)
    plain = ScaledDraw.exp_form
    try:
        ScaledDraw.exp_form = lambda self: None  # the generic path through draw.features
        slow = rk.attention.RFA(MyPositive())(Q, K, V, draw=draw)
    finally:
        ScaledDraw.exp_form = plain
    np.testing.assert_allclose(fast.output, slow.output, rtol=1e-12)


# ----------------------------------------------------------------------------- the public hook sample_one
X4, Y4 = X[:, :4], Y[:, :4]


@dataclasses.dataclass(frozen=True)
class PublicHook(F.FeatureMap):
    """A map of your own written against the public hook ``sample_one(dim, *, rng)``."""

    n_features: int = 6

    def feature_dim(self, dim):
        return self.n_features

    def sample_one(self, dim, *, rng):
        return _Draw(self, dim, rng.standard_normal((self.n_features, dim)))


def test_a_map_with_the_public_hook_follows_the_protocol_and_batches_by_stacking():
    fm = PublicHook()
    F.check_feature_map(fm, dim=4)
    one = fm.sample(4, rng=11)
    assert isinstance(one, _Draw) and one.n_draws is None
    np.testing.assert_array_equal(one.W, np.random.default_rng(11).standard_normal((6, 4)))
    batch = fm.sample(4, rng=11, n_draws=3)
    assert isinstance(batch, F.StackedDraw) and batch.n_draws == 3
    for t, child in enumerate(np.random.default_rng(11).spawn(3)):  # draw t: sample_one on child t
        np.testing.assert_array_equal(batch.kernel(X4, Y4)[t], fm.sample_one(4, rng=child).kernel(X4, Y4))
    with pytest.raises(TypeError):
        fm.sample_one(4, np.random.default_rng(0))  # rng is keyword-only, as everywhere in rfkit
    res = rk.theory.check(fm, 0.5 * X4, 0.5 * Y4, n_trials=2000, rng=3)
    assert res.prediction == "none"


def test_sample_one_of_a_builtin_map_is_one_draw_of_sample():
    fm = F.Positive(8, projection="orthogonal")
    np.testing.assert_array_equal(fm.sample_one(4, rng=5).kernel(X4, Y4), fm.sample(4, rng=5).kernel(X4, Y4))
    assert fm.sample_one(4, rng=5).n_draws is None


def test_a_map_with_the_old_private_hook_warns_at_class_creation_and_still_draws():
    from rfkit.exceptions import RFKitDeprecationWarning

    with pytest.warns(
        RFKitDeprecationWarning, match=r"_sample_one\(dim, rng\).*sample_one\(self, dim, \*, rng\)"
    ) as rec:

        @dataclasses.dataclass(frozen=True)
        class OldHook(F.FeatureMap):
            n_features: int = 6

            def feature_dim(self, dim):
                return self.n_features

            def _sample_one(self, dim, rng):
                return _Draw(self, dim, rng.standard_normal((self.n_features, dim)))

    assert len(rec) == 1 and issubclass(rec[0].category, DeprecationWarning)
    assert "OldHook" in str(rec[0].message)
    assert rec[0].filename == __file__  # points at the class statement
    fm = OldHook()
    F.check_feature_map(fm, dim=4)  # no further warning when it draws (warnings are errors here)
    new = PublicHook()
    np.testing.assert_array_equal(
        fm.sample(4, rng=2, n_draws=2).kernel(X4, Y4), new.sample(4, rng=2, n_draws=2).kernel(X4, Y4)
    )
    np.testing.assert_array_equal(
        fm.sample_one(4, rng=np.random.default_rng(7)).W, new.sample_one(4, rng=np.random.default_rng(7)).W
    )

    class Child(OldHook):  # inherits the old hook without defining it: no second warning
        pass

    np.testing.assert_array_equal(Child().sample(4, rng=2).W, new.sample(4, rng=2).W)
