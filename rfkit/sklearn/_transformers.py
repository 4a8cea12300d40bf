r"""The two kernel-approximation transformers and the translation of errors at the border.

A transformer holds hyperparameters only (scikit-learn's contract: ``__init__`` stores them);
``fit`` validates them against ``_parameter_constraints``, builds the rfkit feature map of
``kind`` (fitted on the data where the map is data-adaptive) and draws its directions for the
input dimension; ``transform`` returns :math:`\phi(x) = e^{\mathrm{log\_scale}(x)}\,
\mathrm{values}(x)` as a dense float64 array, refusing rows whose scale overflows float64.

Errors raised here belong to both families: a bad hyperparameter is an
:class:`rfkit.exceptions.InvalidParameterError` and scikit-learn's ``InvalidParameterError``; an
unfitted transformer raises an :class:`rfkit.exceptions.NotFittedError` that is also
:class:`sklearn.exceptions.NotFittedError`; bad arrays keep scikit-learn's messages and become
:class:`~rfkit.exceptions.ShapeError` or :class:`~rfkit.exceptions.NonFiniteInputError`.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError as _SkNotFittedError
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils._param_validation import InvalidParameterError as _SkInvalidParameterError
from sklearn.utils.validation import validate_data

from .._validation import exp_checked
from ..exceptions import InvalidParameterError, NonFiniteInputError, NotFittedError, ShapeError
from ..features import OPRF, SDERF, FeatureDraw, FeatureMap, Hyperbolic, Positive, Trig
from ..projections import PROJECTIONS

__all__ = ["KINDS", "SoftmaxKernelFeatures", "GaussianKernelFeatures"]

#: The random maps a transformer can use, by ``kind``: each builds the rfkit map from
#: ``(n_components, projection)``. Only symmetric maps (the same features for both arguments of
#: the kernel), so that one feature matrix per data set estimates the kernel by inner products.
KINDS: dict[str, Callable[[int, str], FeatureMap]] = {
    "trig": lambda m, projection: Trig(m, projection=projection),
    "positive": lambda m, projection: Positive(m, projection=projection),
    "hyperbolic": lambda m, projection: Hyperbolic(m, projection=projection),
    "oprf": lambda m, projection: OPRF(m, projection=projection),
    "hyperbolic-oprf": lambda m, projection: OPRF(m, projection=projection, hyperbolic=True),
    "sderf": lambda m, projection: SDERF(m, projection=projection),
}
#: Column names of the maps with 2m columns: the first m, then the second m.
_HALVES = {"trig": ("sin", "cos"), "hyperbolic": ("plus", "minus"), "hyperbolic-oprf": ("plus", "minus")}


class _ParameterError(InvalidParameterError, _SkInvalidParameterError):
    """A hyperparameter outside its constraint: rfkit's and scikit-learn's error at once."""


class _NotFittedError(NotFittedError, _SkNotFittedError):
    """``transform`` before ``fit``: rfkit's and scikit-learn's error at once."""


def _checked_X(estimator: BaseEstimator, X: Any, *, reset: bool) -> np.ndarray:
    """``validate_data`` (float64, 2-D, finite), its ValueErrors as rfkit's, messages kept."""
    try:
        return np.asarray(validate_data(estimator, X, reset=reset, dtype=np.float64))
    except ValueError as exc:
        message = str(exc)
        if "NaN" in message or "infinity" in message:
            raise NonFiniteInputError(message) from exc
        if "features, but" in message or "Expected 2D" in message or "Found array with 0" in message:
            raise ShapeError(message) from exc
        raise


class _KernelFeatures(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator
):  # numpydoc ignore=PR01
    """Shared machinery of the kernel-approximation transformers (scikit-learn's contract)."""

    _parameter_constraints: dict[str, list[Any]] = {
        "kind": [StrOptions(set(KINDS))],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "projection": [StrOptions(set(PROJECTIONS))],
        "random_state": ["random_state", np.random.Generator],
    }

    kind: str
    n_components: int
    projection: str
    random_state: Any

    # ------------------------------------------------------------------ what a kernel changes
    def _inputs(self, X: np.ndarray) -> np.ndarray:
        """The rows whose softmax kernel the map estimates."""
        return X

    def _log_factor(self, X: np.ndarray) -> np.ndarray | float:
        """log of the per-row factor multiplying the softmax-kernel features."""
        return 0.0

    def _resolve(self, X: np.ndarray) -> None:
        """Fitted parameters of the kernel itself (``gamma="scale"``)."""

    # ------------------------------------------------------------------ scikit-learn's API
    def _validated(self) -> None:
        try:
            self._validate_params()
        except _SkInvalidParameterError as exc:
            raise _ParameterError(str(exc)) from None

    def _rng(self) -> Any:
        """``random_state`` as an rfkit ``rng``: a legacy RandomState seeds a new Generator."""
        rs = self.random_state
        if isinstance(rs, np.random.RandomState):
            return np.random.default_rng(int(rs.randint(np.iinfo(np.int32).max)))
        return rs

    def fit(self, X: Any, y: Any = None) -> Any:
        """Draw the random directions for the dimension of ``X`` (and fit adaptive maps on ``X``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows. Data-independent maps use only their number of columns; ``"oprf"``,
            ``"hyperbolic-oprf"`` and ``"sderf"`` fit their parameter ``A`` on ``X`` (as both
            arguments of the kernel).
        y : None
            Ignored; present for the scikit-learn API.

        Returns
        -------
        self
            The fitted transformer.
        """
        self._validated()
        X = _checked_X(self, X, reset=True)
        self._resolve(X)
        U = self._inputs(X)
        spec = KINDS[self.kind](int(self.n_components), self.projection)
        if spec.needs_data:
            spec = spec.fit(U, U)
        self.feature_map_: FeatureMap = spec
        self.draw_: FeatureDraw = spec.sample(X.shape[1], rng=self._rng())
        self._n_out = spec.feature_dim(X.shape[1])
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "draw_")

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise _NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet: call 'fit' with the training "
                "rows before 'transform' or 'get_feature_names_out'."
            )

    def transform(self, X: Any) -> np.ndarray:
        """Dense features whose inner products estimate the kernel.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows with as many columns as the rows given to ``fit``.

        Returns
        -------
        ndarray of shape (n_samples, n_features_out)
            :math:`\\phi(x) = e^{\\mathrm{log\\_scale}(x)}\\,\\mathrm{values}(x)`, float64;
            ``n_features_out`` is ``n_components`` or ``2 * n_components`` (``"trig"``,
            ``"hyperbolic"``, ``"hyperbolic-oprf"``).

        Raises
        ------
        rfkit.exceptions.NumericalOverflowError
            If a row's scale exceeds float64 (softmax kernel of rows with a large norm); the
            scaled features ``draw_.queries(X)`` and log-space estimates stay finite there.
        """
        self._check_fitted()
        X = _checked_X(self, X, reset=False)
        features = self.draw_.queries(self._inputs(X))
        log_scale = np.asarray(features.log_scale, dtype=np.float64) + self._log_factor(X)
        scale = exp_checked(
            log_scale,
            f"{type(self).__name__}.transform (the scale of a row of X)",
            "the scaled features draw_.queries(X) (values, log_scale) or log-space kernel estimates",
        )
        return np.asarray(scale[:, None] * features.values, dtype=np.float64)

    @property
    def _n_features_out(self) -> int:
        """Number of output columns (scikit-learn's name, used by its feature-name helpers)."""
        return int(self._n_out)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Names of the output columns.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Checked against the names seen in ``fit`` (the output names do not depend on them).

        Returns
        -------
        ndarray of str objects
            ``<class name in lower case><i>`` for maps with ``n_components`` columns;
            ``..._sin<i>`` then ``..._cos<i>`` for ``"trig"``, ``..._plus<i>`` then
            ``..._minus<i>`` (the directions :math:`\\pm\\omega_i`) for the hyperbolic maps.
        """
        self._check_fitted()
        names = super().get_feature_names_out(input_features)  # validates input_features
        halves = _HALVES.get(self.kind)
        if halves is None:
            return names
        prefix = type(self).__name__.lower()
        m = int(self.n_components)
        return np.asarray(
            [f"{prefix}_{half}{i}" for half in halves for i in range(m)],
            dtype=object,
        )


class SoftmaxKernelFeatures(_KernelFeatures):
    r"""Random features of the softmax kernel :math:`\exp(x^\top y)` as a scikit-learn transformer.

    ``transform(X) @ transform(Y).T`` estimates ``rfkit.softmax_kernel(X, Y)`` (unbiased for
    every ``kind`` with ``projection`` in {"iid", "orthogonal", "qmc"}); a linear model on the
    features approximates a kernel machine with the softmax kernel. The kernel has no hidden
    :math:`1/\sqrt d`: scale the rows first (a ``FunctionTransformer`` or ``StandardScaler``
    before it) to choose its width.

    Parameters
    ----------
    kind : {"positive", "trig", "hyperbolic", "oprf", "hyperbolic-oprf", "sderf"}, default="positive"
        The random map (:data:`rfkit.sklearn.KINDS`): :class:`rfkit.features.Positive`,
        :class:`~rfkit.features.Trig`, :class:`~rfkit.features.Hyperbolic`,
        :class:`~rfkit.features.OPRF` (its ``A`` fitted on ``X``), ``OPRF(hyperbolic=True)``,
        :class:`~rfkit.features.SDERF` (its matrix ``A`` fitted on ``X``).
    n_components : int, default=100
        Number of random directions ``m`` (rfkit's ``n_features``). ``"trig"``,
        ``"hyperbolic"`` and ``"hyperbolic-oprf"`` return ``2m`` columns (sin and cos, or the
        directions :math:`\pm\omega_i`), the others ``m``; :meth:`get_feature_names_out` lists them.
    projection : {"iid", "orthogonal", "orthogonal-fixed", "qmc", "structured"}, default="iid"
        Distribution of the directions (:mod:`rfkit.projections`).
    random_state : int, numpy.random.Generator, RandomState or None, default=None
        Seeds the directions. Pass an int for reproducible output across multiple function
        calls: ``random_state=s`` draws the directions of ``map.sample(d, rng=s)``.

    Attributes
    ----------
    feature_map_ : rfkit.features.FeatureMap
        The map, with data-adaptive parameters fitted on ``X``.
    draw_ : rfkit.features.FeatureDraw
        Its draw for ``n_features_in_`` columns (``draw_.queries(X)`` gives the scaled features).
    n_features_in_ : int
        Number of columns of ``X`` in ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of ``X`` in ``fit``, when it had string column names.

    See Also
    --------
    GaussianKernelFeatures : The Gaussian kernel with the same maps.

    Notes
    -----
    rfkit keeps features in a scaled form, :math:`\phi(x) = e^{s(x)}\,v(x)` with
    :math:`|v| \le 1`, because the scale :math:`e^{s(x)}` overflows float64 for rows of large
    norm (:math:`e^{\|x\|^2/2}` for trig features): estimates are then computed in log space.
    A transformer must return plain numbers, so ``transform`` multiplies the scale in and raises
    :class:`~rfkit.exceptions.NumericalOverflowError` when it does not fit in float64, naming
    the scaled features ``draw_.queries(X)`` as the way out.

    Examples
    --------
    >>> import numpy as np
    >>> from rfkit.sklearn import SoftmaxKernelFeatures
    >>> X = 0.3 * np.random.default_rng(0).normal(size=(5, 4))
    >>> SoftmaxKernelFeatures(kind="positive", n_components=64, random_state=0).fit_transform(X).shape
    (5, 64)
    """

    def __init__(
        self,
        *,
        kind: str = "positive",
        n_components: int = 100,
        projection: str = "iid",
        random_state: Any = None,
    ) -> None:
        self.kind = kind
        self.n_components = n_components
        self.projection = projection
        self.random_state = random_state


class GaussianKernelFeatures(_KernelFeatures):
    r"""Random features of the Gaussian kernel :math:`\exp(-\gamma\|x-y\|^2)` as a scikit-learn transformer.

    With :math:`\exp(-\gamma\|x-y\|^2) = e^{-\gamma\|x\|^2}e^{-\gamma\|y\|^2}\exp(u^\top v)`,
    :math:`u = \sqrt{2\gamma}\,x`, :math:`v = \sqrt{2\gamma}\,y`, the features are a softmax-kernel
    map of the scaled rows times :math:`e^{-\gamma\|x\|^2}` (joined in log space). ``kind="trig"``
    is :class:`~sklearn.kernel_approximation.RBFSampler`'s estimator (sin/cos pairs instead of a
    random phase); the positive maps give non-negative kernel estimates.

    Parameters
    ----------
    gamma : float or "scale", default=1.0
        The kernel parameter, as in :class:`~sklearn.kernel_approximation.RBFSampler`:
        ``"scale"`` uses ``1 / (n_features * X.var())`` of the rows given to ``fit`` (1.0
        when that variance is 0). ``rfkit.gaussian_kernel`` is ``gamma=0.5``.
    kind : {"trig", "positive", "hyperbolic", "oprf", "hyperbolic-oprf", "sderf"}, default="trig"
        The random map (:data:`rfkit.sklearn.KINDS`), as in :class:`SoftmaxKernelFeatures`.
    n_components : int, default=100
        Number of random directions ``m``. ``"trig"``, ``"hyperbolic"`` and
        ``"hyperbolic-oprf"`` return ``2m`` columns, the others ``m``;
        :meth:`get_feature_names_out` lists them.
    projection : {"iid", "orthogonal", "orthogonal-fixed", "qmc", "structured"}, default="iid"
        Distribution of the directions (:mod:`rfkit.projections`).
    random_state : int, numpy.random.Generator, RandomState or None, default=None
        Seeds the directions. Pass an int for reproducible output across multiple function calls.

    Attributes
    ----------
    gamma_ : float
        The kernel parameter used (``gamma``, or its value from ``"scale"``).
    feature_map_ : rfkit.features.FeatureMap
        The softmax-kernel map of the scaled rows, adaptive parameters fitted on them.
    draw_ : rfkit.features.FeatureDraw
        Its draw (``draw_.queries(sqrt(2 * gamma_) * X)`` are the scaled softmax features).
    n_features_in_ : int
        Number of columns of ``X`` in ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of ``X`` in ``fit``, when it had string column names.

    See Also
    --------
    SoftmaxKernelFeatures : The softmax kernel with the same maps.

    Notes
    -----
    The features stay finite for every input: the factor :math:`e^{-\gamma\|x\|^2}` is added to
    rfkit's log scale before anything is exponentiated (for trig features the two cancel
    exactly). ``transform`` still checks the scale against float64, as
    :class:`SoftmaxKernelFeatures` does.

    Examples
    --------
    >>> import numpy as np
    >>> from rfkit.sklearn import GaussianKernelFeatures
    >>> X = np.random.default_rng(0).normal(size=(5, 3))
    >>> GaussianKernelFeatures(gamma=0.5, n_components=32, random_state=0).fit_transform(X).shape
    (5, 64)
    """

    _parameter_constraints: dict[str, list[Any]] = {
        **_KernelFeatures._parameter_constraints,
        "gamma": [Interval(Real, 0.0, None, closed="neither"), StrOptions({"scale"})],
    }

    def __init__(
        self,
        *,
        gamma: float | str = 1.0,
        kind: str = "trig",
        n_components: int = 100,
        projection: str = "iid",
        random_state: Any = None,
    ) -> None:
        self.gamma = gamma
        self.kind = kind
        self.n_components = n_components
        self.projection = projection
        self.random_state = random_state

    def _resolve(self, X: np.ndarray) -> None:
        if isinstance(self.gamma, str):  # "scale", as RBFSampler
            var = float(X.var())
            self.gamma_ = 1.0 / (X.shape[1] * var) if var != 0.0 else 1.0
        else:
            self.gamma_ = float(self.gamma)

    def _inputs(self, X: np.ndarray) -> np.ndarray:
        return np.sqrt(2.0 * self.gamma_) * X

    def _log_factor(self, X: np.ndarray) -> np.ndarray | float:
        return -self.gamma_ * np.einsum("ij,ij->i", X, X)
