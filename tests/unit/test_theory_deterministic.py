"""Deterministic maps (docs page *Theory*, section 2): exact kernels vs the maps, dimensions, bounds, negativity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import rfkit.features as F
import rfkit.theory as th
from rfkit.exceptions import InvalidParameterError

T_GRID = np.linspace(-8, 8, 321)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("form", ["symmetric", "full"])
def test_truncated_kernel_equals_feature_map(n, form):
    rng = np.random.default_rng(n)
    X, Y = 0.6 * rng.normal(size=(2, 7, 3))
    t = np.sum(X * Y, -1)
    for fm in (F.Taylor(n, form=form), F.Limit(n, form=form)):
        est = fm.sample(3).pairwise(X, Y)
        np.testing.assert_allclose(est, th.truncated_kernel(fm, t), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_feature_dimensions(n):
    d = 3
    for fm in (F.Taylor(n), F.Limit(n)):
        dims = th.deterministic_feature_dim(fm, d)
        assert dims["symmetric"] == math.comb(d + n, n) == F.Taylor(n).feature_dim(d)
    assert th.deterministic_feature_dim(F.Taylor(n), d)["full"] == sum(d**j for j in range(n + 1))
    assert th.deterministic_feature_dim(F.Limit(n), d)["full"] == (d + 1) ** n
    assert th.deterministic_feature_dim(F.Taylor(n, form="full"), d)["full"] == F.Taylor(
        n, form="full"
    ).feature_dim(d)
    assert th.deterministic_feature_dim(F.Limit(n, form="full"), d)["full"] == F.Limit(
        n, form="full"
    ).feature_dim(d)


def test_dimension_examples_d64_n2():
    assert th.deterministic_feature_dim(F.Taylor(2), 64) == {"full": 4161, "symmetric": 2145}
    assert th.deterministic_feature_dim(F.Limit(2), 64) == {"full": 4225, "symmetric": 2145}


@pytest.mark.parametrize("n", range(1, 11))
def test_truncation_bounds_hold_on_grid(n):
    err = th.relative_truncation_error(F.Taylor(n), T_GRID)
    assert np.all(np.abs(err) <= th.truncation_error_bound(F.Taylor(n), T_GRID) * (1 + 1e-12) + 1e-15)
    pos = T_GRID >= 0
    np.testing.assert_allclose(err[pos], stats.poisson.sf(n, T_GRID[pos]), rtol=1e-10, atol=1e-300)
    t = T_GRID[T_GRID > -n]
    el = th.relative_truncation_error(F.Limit(n), t)
    assert np.all(el >= -1e-15)
    assert np.all(el <= th.truncation_error_bound(F.Limit(n), t) * (1 + 1e-12) + 1e-15)


def test_limit_bound_domain():
    with pytest.raises(InvalidParameterError, match="t > -n"):
        th.truncation_error_bound(F.Limit(3), np.array([-3.0, 0.0]))


@pytest.mark.parametrize("n", range(1, 12))
def test_negative_regions(n):
    reg = th.negative_region(F.Taylor(n))
    vals = th.truncated_kernel(F.Taylor(n), T_GRID)
    if n % 2 == 0:
        assert reg.threshold is None and np.all(vals > 0)
    else:
        assert np.all((vals < 0) == (T_GRID < reg.threshold))
    lreg = th.negative_region(F.Limit(n))
    lv = th.truncated_kernel(F.Limit(n), T_GRID)
    if n % 2 == 0:
        assert lreg.threshold is None and np.all(lv >= 0)
    else:
        assert lreg.threshold == -n and np.all((lv < 0) == (T_GRID < -n))


def test_taylor_roots_published_values():
    got = [th.taylor_real_root(n) for n in (1, 3, 5, 7)]
    np.testing.assert_allclose(got, [-1.0, -1.5961, -2.1806, -2.7590], atol=5e-5)
    assert th.taylor_real_root(4) is None


def test_bad_spec():
    with pytest.raises(InvalidParameterError, match="Taylor or Limit"):
        th.truncated_kernel(F.Positive(4), np.zeros(2))
    with pytest.raises(InvalidParameterError, match="degree"):
        th.taylor_real_root(-1)
