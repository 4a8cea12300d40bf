"""Bad input across every public entry point: tables of cases, counted.

Each case calls one entry point with one bad input and states the ``rfkit.exceptions`` class
it must raise, how the message names the argument and how it shows the value received.
To add a case, append a ``Bad(...)`` to ``CASES`` (or a ``Cli(...)`` to ``CLI_CASES``) here or
in a table module ``bad_cases_<area>.py`` beside this file (unlucky but legal inputs that must
give a correct or flagged result go to its ``RESULT_CASES``): the callable gets a temporary
folder for cases that need files. ``test_count`` prints how many cases the suite holds and
fails below ``MIN_CASES``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bad_input_kit import GOOD_TOML, Bad, Cli, Good, _design, _toml

import rfkit as rk
import rfkit.study as st
from rfkit.cli import main as cli_main
from rfkit.exceptions import (
    BackendError,
    InvalidParameterError,
    NonFiniteInputError,
    NumericalOverflowError,
    RFKitError,
    ShapeError,
    SingularMatrixError,
    StudyError,
)

MIN_CASES = 60
F, A, T, B, D = rk.features, rk.attention, rk.theory, rk.theory.bounds, rk.data
_R = np.random.default_rng(2442101192988600726)
X = 0.3 * _R.normal(size=(5, 3))
Y = 0.3 * _R.normal(size=(4, 3))
Q, K, V = 0.3 * _R.normal(size=(6, 3)), 0.3 * _R.normal(size=(7, 3)), _R.normal(size=(7, 2))
X_NAN = X.copy()
X_NAN[1, 2] = np.nan
X_INF = X.copy()
X_INF[0, 0] = np.inf
HUGE = np.full((2, 3), 1e200)
DRAW = F.Positive(8).sample(3, rng=0)


def _strict(a: np.ndarray, device: str | None = None, dtype: str = "float64") -> Any:
    """``a`` as an array of the strict array-API namespace (optionally on another device)."""
    import array_api_strict as xps

    dev = None if device is None else xps.Device(device)
    return xps.asarray(a, dtype=getattr(xps, dtype), device=dev)


class _Alien:
    """An array object of a library rfkit does not compute on."""

    __module__ = "alienlib.core"
    shape = (5, 3)

    def __array_namespace__(self, api_version: Any = None) -> Any:  # pragma: no cover - never called
        raise AssertionError


I2, Z2 = np.eye(2), np.zeros(2)


CASES: list[Bad] = [
    # ------------------------------------------------------------------ feature maps and parameters
    Bad("Positive-n_features-0", lambda t: F.Positive(0), InvalidParameterError, "`n_features`", "Got 0"),
    Bad("Positive-n_features-str", lambda t: F.Positive("8"), InvalidParameterError, "`n_features`", "'8'"),
    Bad(
        "Hyperbolic-n_features-float",
        lambda t: F.Hyperbolic(2.5),
        InvalidParameterError,
        "`n_features`",
        "2.5",
    ),
    Bad(
        "Trig-projection",
        lambda t: F.Trig(3, projection="sobol"),
        InvalidParameterError,
        "`projection`",
        "'sobol'",
    ),
    Bad("CEXP-A-rule", lambda t: F.CEXP(4, A="median"), InvalidParameterError, "`A`", "'median'"),
    Bad("CEXP-A-nan", lambda t: F.CEXP(4, A=np.array([1.0, np.nan, 1.0])), NonFiniteInputError, "`A`", "NaN"),
    Bad("CEXP-A-shape", lambda t: F.CEXP(4, A=np.ones((2, 3))), ShapeError, "`A`", "(2, 3)"),
    Bad(
        "HCEXP-A-singular",
        lambda t: F.HCEXP(4, A=np.array([1.0, 0.0, 1.0])),
        SingularMatrixError,
        "`A`",
        "rcond=0",
    ),
    Bad("OPRF-A-range", lambda t: F.OPRF(4, A=0.3), InvalidParameterError, "`A`", "Got 0.3"),
    Bad("OPRF-A-nan", lambda t: F.OPRF(4, A=float("nan")), InvalidParameterError, "`A`", "nan"),
    Bad("Taylor-degree", lambda t: F.Taylor(-1), InvalidParameterError, "`degree`", "Got -1"),
    Bad("Taylor-form", lambda t: F.Taylor(2, form="dense"), InvalidParameterError, "`form`", "'dense'"),
    Bad("Limit-n", lambda t: F.Limit(0), InvalidParameterError, "`n`", "Got 0"),
    Bad(
        "adaptive_A-rule",
        lambda t: F.adaptive_A(X, Y, rule="median"),
        InvalidParameterError,
        "`rule`",
        "'median'",
    ),
    Bad(
        "CEXP-fit-dims",
        lambda t: F.CEXP(4, A="mean").fit(np.ones((3, 3)), np.ones((3, 4))),
        ShapeError,
        "`K`",
        "(3, 4)",
    ),
    # ------------------------------------------------------------------ GERF, DERF, sketch maps
    Bad("GERF-s", lambda t: F.GERF(4, s=2), InvalidParameterError, "`s`", "Got 2"),
    Bad("GERF-A", lambda t: F.GERF(4, A=0.3), InvalidParameterError, "`A`", "Got 0.3"),
    Bad(
        "SADERF-psi-singular",
        lambda t: F.SADERF(4, psi=np.array([1.0, 0.0, 1.0])),
        SingularMatrixError,
        "`psi`",
        "rcond=0",
    ),
    Bad("SADERF-psi-shape", lambda t: F.SADERF(4, psi=np.ones((2, 2, 2))), ShapeError, "`psi`", "(2, 2, 2)"),
    Bad("ADERF-A", lambda t: F.ADERF(4, A=0.26), InvalidParameterError, "`A`", "Got 0.26"),
    Bad(
        "ADERF-G-singular",
        lambda t: F.ADERF(4, A=-0.1, G=np.zeros((3, 3))),
        SingularMatrixError,
        "`G`",
        "rcond=0",
    ),
    Bad(
        "SDERF-A-symmetric",
        lambda t: F.SDERF(4, A=np.array([[0.0, 0.1], [0.0, 0.0]])),
        InvalidParameterError,
        "`A`",
        "0.1",
    ),
    Bad(
        "SDERF-A-eigenvalue", lambda t: F.SDERF(4, A=np.diag([0.3, 0.0])), InvalidParameterError, "`A`", "0.3"
    ),
    Bad("RandomMaclaurin-p", lambda t: F.RandomMaclaurin(4, p=1.0), InvalidParameterError, "`p`", "Got 1.0"),
    Bad(
        "RandomMaclaurin-distribution",
        lambda t: F.RandomMaclaurin(4, distribution="uniform"),
        InvalidParameterError,
        "`distribution`",
        "'uniform'",
    ),
    Bad(
        "RandomMaclaurin-max_degree",
        lambda t: F.RandomMaclaurin(4, max_degree=-1),
        InvalidParameterError,
        "`max_degree`",
        "Got -1",
    ),
    Bad("TensorSketch-degree", lambda t: F.TensorSketch(4, -1), InvalidParameterError, "`degree`", "Got -1"),
    Bad(
        "TensorSketch-n_features",
        lambda t: F.TensorSketch(0, 2),
        InvalidParameterError,
        "`n_features`",
        "Got 0",
    ),
    Bad(
        "OPRF-hyperbolic",
        lambda t: F.OPRF(4, hyperbolic="yes"),
        InvalidParameterError,
        "`hyperbolic`",
        "'yes'",
    ),
    Bad(
        "Positive-projection-simplex",
        lambda t: F.Positive(4, projection="simplex+"),
        InvalidParameterError,
        "`projection`",
        "'simplex+'",
    ),
    Bad(
        "theory.mse-simplex-plus",
        lambda t: T.mse(F.Positive(4, projection="simplex-plus"), X[:2], Y[:2]),
        InvalidParameterError,
        "projection=",
        "'simplex-plus'",
    ),
    # ------------------------------------------------------------------ backends and threads
    Bad(
        "softmax_kernel-mixed-libraries",
        lambda t: rk.softmax_kernel(_strict(X), Y),
        BackendError,
        "`Y`",
        "numpy",
    ),
    Bad(
        "kernel-mixed-devices",
        lambda t: DRAW.kernel(_strict(X), _strict(Y, "device1")),
        BackendError,
        "`Y`",
        "device1",
    ),
    Bad("softmax_kernel-alien", lambda t: rk.softmax_kernel(_Alien(), Y), BackendError, "`X`", "'alienlib'"),
    Bad(
        "pairwise-int-strict",
        lambda t: DRAW.pairwise(_strict(X), _strict(np.ones((5, 3)), dtype="int64")),
        InvalidParameterError,
        "`Y`",
        "int64",
    ),
    Bad("threads-0", lambda t: rk.threads(0).__enter__(), InvalidParameterError, "`n_threads`", "Got 0"),
    Bad("Design-backend", lambda t: _design(backend="jax"), InvalidParameterError, "`backend`", "'jax'"),
    Bad(
        "Design-device-numpy",
        lambda t: _design(device="cuda"),
        InvalidParameterError,
        "`device`",
        "'cuda'",
    ),
    Bad(
        "Design-on_error",
        lambda t: _design(on_error="ignore"),
        InvalidParameterError,
        "`on_error`",
        "'ignore'",
    ),
    Bad(
        "Design-feature_dim",
        lambda t: _design(estimators=[{"map": "TensorSketch", "degree": 4}], grid={"feature_dim": [3]}),
        InvalidParameterError,
        "`grid.feature_dim`",
        "Got 3",
    ),
    # ------------------------------------------------------------------ benchmark data
    Bad(
        "kernel_benchmark_pairs-set",
        lambda t: D.kernel_benchmark_pairs("gauss", 4),
        InvalidParameterError,
        "`set`",
        "'gauss'",
    ),
    Bad(
        "kernel_benchmark_pairs-dim",
        lambda t: D.kernel_benchmark_pairs("minilm", 4, dim=16),
        InvalidParameterError,
        "`dim`",
        "Got 16",
    ),
    Bad(
        "real_pairs-model",
        lambda t: D.real_pairs(4, model="gpt2"),
        InvalidParameterError,
        "`model`",
        "'gpt2'",
    ),
    # ------------------------------------------------------------------ sample
    Bad("sample-dim-0", lambda t: F.Positive(4).sample(0), InvalidParameterError, "`dim`", "Got 0"),
    Bad("sample-dim-float", lambda t: F.Positive(4).sample(3.0), InvalidParameterError, "`dim`", "3.0"),
    Bad(
        "sample-n_draws-0",
        lambda t: F.Positive(4).sample(3, n_draws=0),
        InvalidParameterError,
        "`n_draws`",
        "Got 0",
    ),
    Bad(
        "sample-rng-str",
        lambda t: F.Positive(4).sample(3, rng="seed"),
        InvalidParameterError,
        "`rng`",
        "'seed'",
    ),
    Bad(
        "sample-rng-legacy",
        lambda t: F.Trig(4).sample(3, rng=np.random.RandomState(0)),  # noqa: NPY002 - the bad input
        InvalidParameterError,
        "`rng`",
        "RandomState",
    ),
    Bad(
        "sample-rng-negative", lambda t: F.Positive(4).sample(3, rng=-1), InvalidParameterError, "`rng`", "-1"
    ),
    Bad("sample-unfitted-rule", lambda t: F.CEXP(4, A="mean").sample(3, rng=0), ShapeError, "A=", "'mean'"),
    # ------------------------------------------------------------------ draws: queries, keys, kernel, pairwise
    Bad("queries-dim", lambda t: DRAW.queries(np.ones((2, 4))), ShapeError, "`X`", "d=4"),
    Bad("keys-nan", lambda t: DRAW.keys(X_NAN), NonFiniteInputError, "`Y`", "NaN"),
    Bad(
        "kernel-int-dtype",
        lambda t: DRAW.kernel(np.ones((2, 3), dtype=np.int32), Y),
        InvalidParameterError,
        "`X`",
        "int32",
    ),
    Bad("kernel-Y-dim", lambda t: DRAW.kernel(X, np.ones((2, 4))), ShapeError, "`Y`", "d=4"),
    Bad(
        "kernel-batch",
        lambda t: DRAW.kernel(np.ones((2, 5, 3)), np.ones((3, 4, 3))),
        ShapeError,
        "X: (2,)",
        "Y: (3,)",
    ),
    Bad("kernel-huge", lambda t: DRAW.kernel(HUGE, Y), NumericalOverflowError, "`X`", "1e+200"),
    Bad("log_kernel-1d", lambda t: DRAW.log_kernel(np.ones(3), Y), ShapeError, "`X`", "(3,)"),
    Bad("pairwise-rows", lambda t: DRAW.pairwise(X, Y), ShapeError, "`X` and `Y`", "5 != 4"),
    Bad(
        "pairwise-float16",
        lambda t: DRAW.pairwise(X.astype(np.float16), X.astype(np.float16)),
        InvalidParameterError,
        "`X`",
        "float16",
    ),
    # ------------------------------------------------------------------ softmax_kernel
    Bad(
        "softmax_kernel-int",
        lambda t: rk.softmax_kernel(np.ones((2, 3), dtype=int), Y),
        InvalidParameterError,
        "`X`",
        "int64",
    ),
    Bad(
        "softmax_kernel-complex",
        lambda t: rk.softmax_kernel(X.astype(complex), Y),
        InvalidParameterError,
        "`X`",
        "complex128",
    ),
    Bad("softmax_kernel-dim", lambda t: rk.softmax_kernel(X, np.ones((2, 4))), ShapeError, "`Y`", "(2, 4)"),
    Bad("softmax_kernel-nan", lambda t: rk.softmax_kernel(X_NAN, Y), NonFiniteInputError, "`X`", "NaN"),
    Bad(
        "log_softmax_kernel-inf",
        lambda t: rk.log_softmax_kernel(X, X_INF),
        NonFiniteInputError,
        "`Y`",
        "infinity",
    ),
    Bad(
        "softmax_kernel-overflow",
        lambda t: rk.softmax_kernel(np.array([[30.0]]), np.array([[30.0]])),
        NumericalOverflowError,
        "log_softmax_kernel",
        "900",
    ),
    Bad(
        "log_softmax_kernel-huge",
        lambda t: rk.log_softmax_kernel(X, HUGE),
        NumericalOverflowError,
        "`Y`",
        "1e+200",
    ),
    Bad(
        "softmax_kernel-check_finite",
        lambda t: rk.softmax_kernel(X, Y, check_finite="no"),
        InvalidParameterError,
        "`check_finite`",
        "'no'",
    ),
    # ------------------------------------------------------------------ attention estimators
    Bad("softmax-V-rows", lambda t: A.softmax(Q, K, np.ones((5, 2))), ShapeError, "`V`", "(5, 2)"),
    Bad("softmax-K-dim", lambda t: A.softmax(Q, np.ones((7, 4)), V), ShapeError, "`K`", "(7, 4)"),
    Bad(
        "softmax-causal-type",
        lambda t: A.softmax(Q, K, V, causal="yes"),
        InvalidParameterError,
        "`causal`",
        "'yes'",
    ),
    Bad("softmax-causal-rows", lambda t: A.softmax(Q, K, V, causal=True), ShapeError, "`causal=True`", "M=7"),
    Bad(
        "softmax-chunk_size",
        lambda t: A.softmax(Q, K, V, chunk_size=0),
        InvalidParameterError,
        "`chunk_size`",
        "Got 0",
    ),
    Bad(
        "softmax-V-nan", lambda t: A.softmax(Q, K, np.full((7, 2), np.nan)), NonFiniteInputError, "`V`", "NaN"
    ),
    Bad("softmax-empty", lambda t: A.softmax(Q[:0], K, V), ShapeError, "empty input", "Q.shape=(0, 3)"),
    Bad("RFA-feature_map", lambda t: A.RFA("positive"), InvalidParameterError, "`feature_map`", "'positive'"),
    Bad("RFA-causal", lambda t: A.RFA(F.Positive(4), causal=1), InvalidParameterError, "`causal`", "Got 1"),
    Bad("RFA-rng", lambda t: A.RFA(F.Positive(4))(Q, K, V, rng=1.5), InvalidParameterError, "`rng`", "1.5"),
    Bad(
        "RFA-n_draws",
        lambda t: A.RFA(F.Positive(4))(Q, K, V, rng=0, n_draws=0),
        InvalidParameterError,
        "`n_draws`",
        "Got 0",
    ),
    Bad(
        "RFA-Q-huge",
        lambda t: A.RFA(F.Positive(4))(HUGE, K, V, rng=0),
        NumericalOverflowError,
        "`Q`",
        "1e+200",
    ),
    Bad("RA-n_samples", lambda t: A.RA(n_samples=0), InvalidParameterError, "`n_samples`", "Got 0"),
    Bad(
        "RA-V-dtype",
        lambda t: A.RA(n_samples=4)(Q, K, V.astype(int), rng=0),
        InvalidParameterError,
        "`V`",
        "int64",
    ),
    Bad(
        "SNIS-proposal",
        lambda t: A.SNIS(proposal="magic", n_samples=4),
        InvalidParameterError,
        "`proposal`",
        "'magic'",
    ),
    Bad("SNIS-n_samples", lambda t: A.SNIS(n_samples=-1), InvalidParameterError, "`n_samples`", "Got -1"),
    Bad("LARA-n_proposals", lambda t: A.LARA(n_proposals=0), InvalidParameterError, "`n_proposals`", "Got 0"),
    Bad("LARA-weights", lambda t: A.LARA(weights="best"), InvalidParameterError, "`weights`", "'best'"),
    Bad(
        "LARA-alpha_floor", lambda t: A.LARA(alpha_floor=-1.0), InvalidParameterError, "`alpha_floor`", "-1.0"
    ),
    # ------------------------------------------------------------------ theory and bounds
    Bad(
        "mse-dims",
        lambda t: T.mse(F.Positive(4), np.ones((2, 3)), np.ones((2, 4))),
        ShapeError,
        "`y`",
        "(2, 4)",
    ),
    Bad(
        "mse-no-closed-form",
        lambda t: T.mse(F.Positive(4, projection="qmc"), X, X),
        InvalidParameterError,
        "projection=",
        "'qmc'",
    ),
    Bad(
        "mse-n_features",
        lambda t: T.mse(F.Positive(4), X, X, n_features=0),
        InvalidParameterError,
        "`n_features`",
        "Got 0",
    ),
    Bad("mse-nan", lambda t: T.mse(F.Positive(4), X_NAN, X), NonFiniteInputError, "`x`", "NaN"),
    Bad(
        "check-n_trials",
        lambda t: T.check(F.Positive(4), X, X, n_trials=0, rng=0),
        InvalidParameterError,
        "`n_trials`",
        "Got 0",
    ),
    Bad(
        "check-feature_map",
        lambda t: T.check("Positive", X, X, n_trials=10, rng=0),
        InvalidParameterError,
        "feature map",
        "'Positive'",
    ),
    Bad(
        "expected_mse-sigma2",
        lambda t: T.expected_mse(F.Positive(4), -1.0, 3),
        InvalidParameterError,
        "`sigma2`",
        "-1.0",
    ),
    Bad(
        "truncated_kernel-map",
        lambda t: T.truncated_kernel(F.Positive(4), 0.5),
        InvalidParameterError,
        "Taylor or Limit",
        "Positive(n_features=4",
    ),
    Bad(
        "taylor_real_root-degree",
        lambda t: T.taylor_real_root(-2),
        InvalidParameterError,
        "`degree`",
        "Got -2",
    ),
    Bad(
        "rfa_delta_method-V",
        lambda t: T.rfa_delta_method(np.ones(3), K, np.ones((6, 2))),
        ShapeError,
        "V must be",
        "(6, 2)",
    ),
    Bad(
        "max_relative_error-r", lambda t: B.max_relative_error(-0.5, 64), InvalidParameterError, "`r`", "-0.5"
    ),
    Bad(
        "max_relative_error-m",
        lambda t: B.max_relative_error(0.5, 0),
        InvalidParameterError,
        "`n_features`",
        "Got 0",
    ),
    Bad(
        "max_relative_error-kind",
        lambda t: B.max_relative_error(0.5, 64, kind="gaussian"),
        InvalidParameterError,
        "`kind`",
        "'gaussian'",
    ),
    Bad(
        "max_relative_error-orthogonal-no-d",
        lambda t: B.max_relative_error(0.5, 64, kind="positive", projection="orthogonal"),
        InvalidParameterError,
        "`d`",
        "None",
    ),
    Bad(
        "max_relative_error-orthogonal-trig",
        lambda t: B.max_relative_error(0.5, 64, kind="trig", projection="orthogonal", d=4),
        InvalidParameterError,
        "`projection`",
        "'orthogonal'",
    ),
    Bad(
        "chi2-A-for-positive",
        lambda t: B.chi2_concentration(Z2, I2, Z2, I2, np.array([2.0, 1.0]), 4, 0.9, 16, kind="positive"),
        InvalidParameterError,
        "`A`",
        "non-identity",
    ),
    Bad(
        "chi2-p",
        lambda t: B.chi2_concentration(Z2, I2, Z2, I2, None, 4, 1.5, 16),
        InvalidParameterError,
        "`p`",
        "1.5",
    ),
    Bad(
        "chi2-cov",
        lambda t: B.chi2_concentration(Z2, -I2, Z2, I2, None, 4, 0.5, 16),
        InvalidParameterError,
        "`cov_x`",
        "-1",
    ),
    Bad(
        "chi2-A-singular",
        lambda t: B.chi2_concentration(Z2, I2, Z2, I2, np.zeros((2, 2)), 4, 0.5, 16),
        SingularMatrixError,
        "`A`",
        "singular value 0",
    ),
    Bad(
        "chi2-n_points",
        lambda t: B.chi2_concentration(Z2, I2, Z2, I2, None, 0, 0.5, 16),
        InvalidParameterError,
        "`n_points`",
        "Got 0",
    ),
    Bad(
        "chi2-shapes",
        lambda t: B.chi2_concentration(np.zeros(3), I2, Z2, I2, None, 4, 0.5, 16),
        ShapeError,
        "`cov_x`",
        "(2, 2)",
    ),
    Bad(
        "hotelling-few-samples",
        lambda t: B.hotelling_concentration(np.ones((2, 3)), np.ones((2, 3)), None, 0.5, 16),
        InvalidParameterError,
        "`X`",
        "n=2",
    ),
    Bad(
        "hotelling-points",
        lambda t: B.hotelling_concentration(X, X, None, 0.5, 16, points="all"),
        InvalidParameterError,
        "`points`",
        "'all'",
    ),
    # ------------------------------------------------------------------ rk.data
    Bad("gaussian_qk-n", lambda t: D.gaussian_qk(0, 3, rng=0), InvalidParameterError, "`n`", "Got 0"),
    Bad("gaussian_qk-dim", lambda t: D.gaussian_qk(4, 0, rng=0), InvalidParameterError, "`dim`", "Got 0"),
    Bad(
        "gaussian_qk-cov",
        lambda t: D.gaussian_qk(4, 3, cov_q=-1.0, rng=0),
        InvalidParameterError,
        "`cov_q`",
        "-1",
    ),
    Bad(
        "hard_qk-shape",
        lambda t: D.hard_qk(4, 3, var_shape_q=0.0, rng=0),
        InvalidParameterError,
        "`var_shape_q`",
        "0.0",
    ),
    Bad(
        "pairs_with_norms-norm",
        lambda t: D.pairs_with_norms(4, 3, norm_x=-1.0, rng=0),
        InvalidParameterError,
        "`norm_x`",
        "-1.0",
    ),
    Bad(
        "pairs_with_norms-cosine",
        lambda t: D.pairs_with_norms(4, 3, cosine=1.5, rng=0),
        InvalidParameterError,
        "`cosine`",
        "1.5",
    ),
    Bad(
        "sequence_qkv-structure",
        lambda t: D.sequence_qkv(8, 3, structure="wavy", rng=0),
        InvalidParameterError,
        "`structure`",
        "'wavy'",
    ),
    Bad(
        "sequence_qkv-n_tokens",
        lambda t: D.sequence_qkv(0, 3, rng=0),
        InvalidParameterError,
        "`n_tokens`",
        "Got 0",
    ),
    Bad(
        "minilm_qk-layers",
        lambda t: D.minilm_qk(["a b"], layers=[9]),
        InvalidParameterError,
        "`layers`",
        "Got 9",
    ),
    Bad(
        "minilm_qk-max_len",
        lambda t: D.minilm_qk(["a b"], max_len=0),
        InvalidParameterError,
        "`max_len`",
        "Got 0",
    ),
    Bad("minilm_qk-texts", lambda t: D.minilm_qk([3]), InvalidParameterError, "`texts[0]`", "int"),
    Bad(
        "minilm_qk-scale",
        lambda t: D.minilm_qk(["a"], scale="none"),
        InvalidParameterError,
        "`scale`",
        "'none'",
    ),
    Bad("tokenize-max_len", lambda t: D.tokenize("a", max_len=-2), InvalidParameterError, "`max_len`", "-2"),
    Bad("describe-1d", lambda t: D.describe(np.ones(3), np.ones(3)), ShapeError, "`q`", "(3,)"),
    # ------------------------------------------------------------------ rk.study.run, designs, load_design, run folders
    Bad(
        "run-executor",
        lambda t: st.run(_design(), executor="threads"),
        InvalidParameterError,
        "`executor`",
        "'threads'",
    ),
    Bad("run-workers", lambda t: st.run(_design(), workers=0), InvalidParameterError, "`workers`", "Got 0"),
    Bad(
        "run-on_error",
        lambda t: st.run(_design(), on_error="ignore"),
        InvalidParameterError,
        "`on_error`",
        "'ignore'",
    ),
    Bad("run-trials", lambda t: st.run(_design(), trials=0), InvalidParameterError, "`trials`", "Got 0"),
    Bad("run-rng", lambda t: st.run(_design(), rng="x"), InvalidParameterError, "`rng`", "'x'"),
    Bad("run-design-type", lambda t: st.run(42), InvalidParameterError, "`design`", "int"),
    Bad(
        "run-resume-no-out",
        lambda t: st.run(_design(), resume=True),
        InvalidParameterError,
        "`out`",
        "resume=True",
    ),
    Bad(
        "run-resume-type",
        lambda t: st.run(_design(), resume="yes", out=t / "o"),
        InvalidParameterError,
        "`resume`",
        "'yes'",
    ),
    Bad(
        "run-lock_timeout",
        lambda t: st.run(_design(), out=t / "o", lock_timeout=-1),
        InvalidParameterError,
        "`lock_timeout`",
        "-1",
    ),
    Bad(
        "run-missing-file",
        lambda t: st.run(t / "nope.toml"),
        InvalidParameterError,
        "study file",
        "nope.toml",
    ),
    Bad(
        "run-resume-other-design",
        lambda t: (st.run(_design(), out=t / "o"), st.run(_design(trials=5), out=t / "o", resume=True)),
        StudyError,
        "different design, seed or backend",
        "design hash",
    ),
    Bad("Design-trials", lambda t: _design(trials=0), InvalidParameterError, "`trials`", "Got 0"),
    Bad("Design-kind", lambda t: _design(kind="vision"), InvalidParameterError, "`kind`", "'vision'"),
    Bad(
        "Design-metrics",
        lambda t: _design(metrics=["accuracy"]),
        InvalidParameterError,
        "`metrics`",
        "['accuracy']",
    ),
    Bad(
        "Design-grid-values",
        lambda t: _design(grid={"n_features": [0]}),
        InvalidParameterError,
        "`grid.n_features`",
        "Got 0",
    ),
    Bad(
        "Design-map",
        lambda t: _design(estimators=[{"map": "Gaussian"}]),
        InvalidParameterError,
        "`estimators[0].map`",
        "'Gaussian'",
    ),
    Bad(
        "load_design-toml",
        lambda t: st.load_design(_toml(t, GOOD_TOML + "\n[[[bad")),
        InvalidParameterError,
        "s.toml",
        "malformed TOML",
    ),
    Bad(
        "load_design-key",
        lambda t: st.load_design(_toml(t, GOOD_TOML.replace("trials = 4", "trials = 4\ncolour = 1"))),
        InvalidParameterError,
        "`colour`",
        "['colour']",
    ),
    Bad(
        "load_design-source",
        lambda t: st.load_design(_toml(t, GOOD_TOML.replace('"pairs"', '"imagenet"'))),
        InvalidParameterError,
        "`data.source`",
        "'imagenet'",
    ),
    Bad(
        "verify_run-folder", lambda t: st.verify_run(t / "nowhere"), InvalidParameterError, "`out`", "nowhere"
    ),
    Bad(
        "StudyResult.load-folder",
        lambda t: st.StudyResult.load(t / "nowhere"),
        StudyError,
        "study result folder",
        "nowhere",
    ),
]

CLI_CASES: list[Cli] = [
    Cli(
        "run-bad-map",
        lambda t: ["run", str(_toml(t, GOOD_TOML.replace('"Positive"', '"Nope"'))), "--out", str(t / "o")],
        2,
        "estimators[0].map",
        "'Nope'",
    ),
    Cli("run-missing-file", lambda t: ["run", str(t / "missing.toml")], 2, "study file", "missing.toml"),
    Cli(
        "run-trials",
        lambda t: ["run", str(_toml(t, GOOD_TOML)), "--trials", "0", "--out", str(t / "o")],
        2,
        "`trials`",
        "Got 0",
    ),
    Cli(
        "run-workers",
        lambda t: ["run", str(_toml(t, GOOD_TOML)), "--workers", "0", "--out", str(t / "o")],
        2,
        "`workers`",
        "Got 0",
    ),
    Cli(
        "run-wait-lock",
        lambda t: ["run", str(_toml(t, GOOD_TOML)), "--wait-lock", "-1"],
        2,
        "--wait-lock",
        "'-1'",
    ),
    Cli(
        "bound-r",
        lambda t: ["bound", "max-relative-error", "--r", "-1", "--n-features", "8"],
        2,
        "`r`",
        "-1.0",
    ),
    Cli(
        "bound-chi2-p",
        lambda t: [
            "bound",
            "chi2",
            *("--mean-x [0,0] --cov-x 1 --mean-y [0,0] --cov-y 1".split()),
            "-s",
            "4",
            "--p",
            "2",
            "-m",
            "8",
        ],
        2,
        "`p`",
        "2.0",
    ),
    Cli(
        "bound-chi2-array",
        lambda t: [
            "bound",
            "chi2",
            *("--mean-x oops --cov-x 1 --mean-y [0,0] --cov-y 1".split()),
            "-s",
            "4",
            "--p",
            "0.5",
            "-m",
            "8",
        ],
        2,
        "--mean-x",
        "'oops'",
    ),
]


# Tables of further areas live in bad_cases_<area>.py beside this file; each is collected here.
_TABLES = [importlib.import_module(p.stem) for p in sorted(Path(__file__).parent.glob("bad_cases_*.py"))]
CASES += [c for t in _TABLES for c in getattr(t, "CASES", [])]
CLI_CASES += [c for t in _TABLES for c in getattr(t, "CLI_CASES", [])]
RESULT_CASES: list[Good] = [c for t in _TABLES for c in getattr(t, "RESULT_CASES", [])]


def _check_message(message: str, arg: str, value: str) -> None:
    assert arg in message, f"the message does not name the argument {arg!r}: {message}"
    assert value in message, f"the message does not show the value {value!r}: {message}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Bad, tmp_path: Path) -> None:
    with pytest.raises(RFKitError) as info:
        case.call(tmp_path)
    assert isinstance(info.value, case.error), f"{type(info.value).__name__}: {info.value}"
    _check_message(str(info.value), case.arg, case.value)


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_bad_command_line(case: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli_main(case.argv(tmp_path))
    err = capsys.readouterr().err
    assert status == case.status, err
    assert "Traceback" not in err
    _check_message(err, case.arg, case.value)


@pytest.mark.parametrize("case", RESULT_CASES, ids=[c.id for c in RESULT_CASES])
def test_unlucky_input_gives_a_correct_or_flagged_result(case: Good, tmp_path: Path) -> None:
    case.check(tmp_path)


def test_count(capsys: pytest.CaptureFixture[str]) -> None:
    ids = (
        [c.id for c in CASES] + [f"cli:{c.id}" for c in CLI_CASES] + [f"result:{c.id}" for c in RESULT_CASES]
    )
    assert len(set(ids)) == len(ids), "case ids must be unique"
    entry_points = {re.split(r"[-.:]", i)[0] for i in ids}
    with capsys.disabled():
        print(
            f"\nbad-input suite: {len(ids)} cases ({len(CASES)} calls, {len(CLI_CASES)} command lines, "
            f"{len(RESULT_CASES)} correct-or-flagged results) "
            f"over {len(entry_points)} entry points"
        )
    assert len(ids) >= MIN_CASES
