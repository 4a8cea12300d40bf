"""rfkit's own feature maps, attention estimators, metrics and closed forms, registered for studies.

They go through the same public ``register_*`` functions a user calls (docs page "Bring your
own estimator"); data sources are in :mod:`rfkit.study._data_sources`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import attention, features, theory
from ..exceptions import InvalidParameterError, NumericalOverflowError
from . import _builtin_attention_hooks as hooks
from . import _metric_columns as cols
from ._records import (
    AttentionEstimatorRecord,
    Capabilities,
    ClosedFormRecord,
    FeatureMapRecord,
    MetricRecord,
    register_attention_estimator,
    register_closed_form,
    register_feature_map,
    register_metric,
)

__all__ = ["theory_mse", "hybrid_budget"]

# ----------------------------------------------------------------------------- feature maps
_REFERENCES = {
    "Trig": "Rahimi & Recht (NeurIPS 2007); Choromanski et al. (ICLR 2021), eq. (5)",
    "Positive": "Choromanski et al. (ICLR 2021)",
    "Hyperbolic": "Choromanski et al. (ICLR 2021)",
    "CEXP": "Blackwelder (2024), Adapting Linear Attention to Query-Key Distributions",
    "HCEXP": "Blackwelder (2024), Adapting Linear Attention to Query-Key Distributions",
    "OPRF": "Likhosherstov et al. (NeurIPS 2022)",
    "GERF": "Likhosherstov et al. (NeurIPS 2022)",
    "SADERF": "Likhosherstov et al. (2023), FAVOR#",
    "Taylor": "docs page *Theory*, section 2",
    "Limit": "docs page *Theory*, section 2",
    "ADERF": "Likhosherstov et al. (NeurIPS 2023)",
    "SDERF": "Likhosherstov et al. (NeurIPS 2023)",
    "RandomMaclaurin": "Kar & Karnick (AISTATS 2012)",
    "TensorSketch": "Pham & Pagh (KDD 2013)",
}


def theory_mse(fm: Any, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Closed-form MSE per pair from :func:`rfkit.theory.mse` (NaN where it has none; inf past float64)."""
    try:
        return np.asarray(theory.mse(fm, X, Y), dtype=float)
    except InvalidParameterError:  # no closed form in rfkit.theory for this map / projection
        return np.full(X.shape[0], np.nan)
    except NumericalOverflowError:  # the MSE itself exceeds float64: keep it infinite, never silently NaN
        return np.exp(np.asarray(theory.log_mse(fm, X, Y), dtype=float))


def _is_map(obj: Any) -> bool:
    return (
        isinstance(obj, type)
        and issubclass(obj, features.FeatureMap)
        and not inspect.isabstract(obj)
        and obj is not features.FeatureMap
    )


for _name in features.__all__:
    _cls = getattr(features, _name)
    if not _is_map(_cls):
        continue
    register_feature_map(
        FeatureMapRecord(
            name=_name,
            factory=_cls,
            capabilities=Capabilities(
                positive=bool(_cls.is_positive),
                closed_form=bool(_cls.is_random),  # rfkit.theory has the MSE of every random map
                batched=bool(_cls.shares_projection),
                data_dependent=_cls.fit is not features.FeatureMap.fit,
            ),
            description=(inspect.getdoc(_cls) or "").split("\n", 1)[0],
            reference=_REFERENCES.get(_name, ""),
        )
    )
    if _cls.is_random:  # deterministic maps (Taylor, Limit) have no variance: their error is the bias
        register_closed_form(
            ClosedFormRecord(
                _name, theory_mse, description="rfkit.theory.mse", reference="docs page *Theory*"
            )
        )


# ----------------------------------------------------------------------------- attention estimators
def _n_samples(samples: int, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"n_samples": samples}


def _lara_budget(samples: int, params: Mapping[str, Any]) -> dict[str, Any]:
    k = int(params.get("samples_per_proposal", 1))
    if samples % k:
        raise InvalidParameterError(
            f"LARA: `samples`={samples} is not a multiple of samples_per_proposal={k}."
        )
    return {"n_proposals": samples // k}


_CAUSAL = Capabilities(causal=True)
#: rfkit's estimators: equal instances in a cell make the same calls on the same trial streams
_SAME: dict[str, Any] = {"deduplicate": True}
#: SNIS, LARA and RA: each trial from its own stream (the backend's generator with draws = "backend")
_SAMPLED: dict[str, Any] = {
    "call_trial": hooks.sampled_call,
    "device_draws": hooks.sampled_device_draws,
    **_SAME,
}
register_attention_estimator(
    AttentionEstimatorRecord(
        "RFA",
        attention.RFA,
        inner_map="feature_map=Positive",
        capabilities=_CAUSAL,
        batched=hooks.rfa_batched,
        call_trial=hooks.rfa_call,
        device_draws=hooks.rfa_device_draws,
        fit=hooks.rfa_fit,
        cost=hooks.rfa_cost,
        deterministic=hooks.is_deterministic,
        **_SAME,
        description="linear attention with a feature map's random features (samples: the map's n_features)",
        reference="Choromanski et al. (ICLR 2021); Peng et al. (ICLR 2021)",
    )
)
register_attention_estimator(
    AttentionEstimatorRecord(
        "RA",
        attention.RA,
        from_budget=_n_samples,
        capabilities=_CAUSAL,
        batched=hooks.ra_batched,
        cost=hooks.ra_cost,
        **_SAMPLED,
        description="randomized attention, unbiased Monte Carlo (samples: n_samples)",
        reference="Zheng, Wang & Kong (ICML 2022)",
    )
)
register_attention_estimator(
    AttentionEstimatorRecord(
        "SNIS",
        attention.SNIS,
        from_budget=_n_samples,
        capabilities=_CAUSAL,
        batched=hooks.snis_batched,
        cost=hooks.snis_cost,
        **_SAMPLED,
        description="self-normalised importance sampling (samples: n_samples)",
        reference="Zheng, Wang & Kong (ICML 2022); Owen (2013), ch. 9",
    )
)
register_attention_estimator(
    AttentionEstimatorRecord(
        "LARA",
        attention.LARA,
        from_budget=_lara_budget,
        capabilities=_CAUSAL,
        batched=hooks.lara_batched,
        cost=hooks.lara_cost,
        **_SAMPLED,
        description="linear randomized attention (samples: n_proposals x samples_per_proposal)",
        reference="Zheng, Wang & Kong (ICML 2022)",
    )
)


def _whole(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def hybrid_budget(budget: int, params: Mapping[str, Any]) -> dict[str, Any]:
    """Split a per-query budget of Hybrid between its support and its feature map.

    The support's nominal exact keys per query come first: ``2 window + 1`` (causal: ``window +
    1``) plus ``n_global``; the rest, ``map_budget``, goes to the map (its feature columns for a
    ``feature_dim`` budget, its random features for a ``samples`` budget). So Hybrid at
    ``feature_dim = 64`` costs what RFA does at 64 columns, cost per query being exact keys plus
    feature count (docs page *Studies*, section "Cost per query"). Near the ends of a sequence
    a window holds fewer keys, so the measured cost is at most the budget. LSH buckets depend on
    the data and cannot be split ahead: such an entry names the map's ``n_features`` itself.

    Without features (``remainder`` ``"none"``, ``"uniform"``, ``"stratified"`` or
    ``"importance"``; docs page *Keys by content*) the rest goes to exact logits instead: all to
    ``top_k`` with ``"none"``; all to ``n_samples`` without a ``scorer``; with a scorer and a
    sampled remainder, half to ``top_k`` (rounded down) and the other half to ``n_samples``, or,
    where the entry gives one of them, what it leaves to the other. Each query then computes at
    most the budget's exact logits (causally, only the keys it may see; Quest adds whole blocks;
    the ``"oracle"`` scorer's scores, every visible key's logit, come on top: a reference).

    >>> hybrid_budget(64, {"window": 16, "n_global": 4, "causal": True})
    {'map_budget': 43}
    >>> hybrid_budget(64, {"window": 16})
    {'map_budget': 31}
    >>> hybrid_budget(64, {"window": 4, "n_global": 4, "causal": True, "scorer": "quest", "remainder": "uniform"})
    {'top_k': 27, 'n_samples': 28}
    """
    window, n_global = params.get("window"), params.get("n_global", 0)
    if params.get("lsh_buckets") is not None:
        raise InvalidParameterError(
            "Hybrid with `lsh_buckets`: the sizes of its LSH buckets depend on the data, so a study budget cannot be "
            "split ahead; give the map's `n_features` in the entry (the cost per query is measured and "
            f"reported). Got lsh_buckets={params['lsh_buckets']!r} with a budget of {budget}."
        )
    if (window is not None and not _whole(window)) or not _whole(n_global):
        return {"map_budget": budget}  # Hybrid itself refuses the value, naming the rule
    causal = bool(params.get("causal", False))
    exact = (0 if window is None else int(window) + 1 if causal else 2 * int(window) + 1) + int(n_global)
    if not _uses_features(params):
        return _content_budget(budget, exact, params)
    if budget - exact < 1:
        raise InvalidParameterError(
            f"Hybrid: a budget (`feature_dim` or `samples`) of {budget} per query leaves no random features "
            f"after the support's {exact} "
            f"exact keys (window={window}, n_global={n_global}, causal={causal}); use a smaller window or "
            "fewer sinks, or a larger budget."
        )
    return {"map_budget": budget - exact}


def _uses_features(params: Mapping[str, Any]) -> bool:
    """A Hybrid entry with the random-feature remainder (the default), which needs a feature map."""
    return params.get("remainder", "features") in (None, "features")


def _content_budget(budget: int, exact: int, params: Mapping[str, Any]) -> dict[str, Any]:
    """``top_k`` and ``n_samples`` of a Hybrid without features: the budget after ``exact`` support keys."""
    rest = budget - exact
    sampled = params.get("remainder") != "none"
    top_k, n_samples = params.get("top_k"), params.get("n_samples")
    if not (_whole(top_k) or top_k is None) or not (_whole(n_samples) or n_samples is None):
        return {}  # Hybrid itself refuses the value, naming the rule
    given = int(top_k or 0) + int(n_samples or 0)
    if top_k is not None and (n_samples is not None or not sampled):
        return {}  # the entry fixed the split itself
    wants_top_k = params.get("scorer") is not None and top_k is None
    parts = int(wants_top_k) + int(sampled and n_samples is None)
    if rest - given < max(parts, 1):
        raise InvalidParameterError(
            f"Hybrid: a budget (`feature_dim` or `samples`) of {budget} per query leaves {rest - given} keys "
            f"after the support's {exact} exact keys{f' and {given} fixed ones' if given else ''}, too few "
            f"for top_k and n_samples (window={params.get('window')}, n_global={params.get('n_global', 0)}, "
            f"causal={bool(params.get('causal', False))}); use a smaller window or fewer sinks, or a larger "
            "budget."
        )
    left = rest - given
    if wants_top_k and sampled and n_samples is None:
        return {"top_k": left // 2, "n_samples": left - left // 2}
    if wants_top_k:
        return {"top_k": left}
    return {"n_samples": left}


register_attention_estimator(
    AttentionEstimatorRecord(
        "Hybrid",
        attention.Hybrid,
        from_budget=hybrid_budget,
        inner_map="feature_map=Positive",
        uses_map=_uses_features,
        capabilities=_CAUSAL,
        batched=hooks.hybrid_batched,
        cost=hooks.hybrid_cost,
        deterministic=hooks.is_deterministic,
        **_SAME,
        description=(
            "exact softmax on a sparse support (window, sinks, LSH buckets) + random features for the rest "
            "(budget: the support's exact keys, then the map's features)"
        ),
        reference="Chen, Dao et al. (NeurIPS 2021) (Scatterbrain); docs page *Sparse + random features*",
    )
)

# ----------------------------------------------------------------------------- metrics
_K, _A, _KA, _C = ("kernel",), ("attention",), ("kernel", "attention"), ("concentration",)
_D = ("drop-in",)


def _default_metric(*args: Any, **kwargs: Any) -> MetricRecord:
    """rfkit's metrics are part of the defaults unless they say otherwise."""
    return MetricRecord(*args, **{"default": True, **kwargs})


def _both(kernel: Any, column: str) -> cols.PerKind:
    """The ``compute`` of a metric of kernel and attention designs."""
    return cols.PerKind(kernel=kernel, attention=cols.attention_column(column))


def _theory_mse(pairs: Any) -> Any:
    """The closed-form MSE of each pair (the ``theory`` of ``mse``)."""
    return pairs["theory_mse"]


def _theory_rel_mse(pairs: Any) -> Any:
    """The closed-form MSE of each pair over its squared kernel value (the ``theory`` of ``rel_mse``)."""
    return pairs["theory_mse"] / pairs["truth"] ** 2


for _metric in (
    _default_metric(
        "mse",
        _KA,
        "sq_err",
        compute=_both(cols.kernel_sq_err, "sq_err"),
        theory=_theory_mse,
        description="mean over pairs of E[(K_hat - K)^2]",
    ),
    _default_metric(
        "rel_mse",
        _K,
        "rel_sq_err",
        compute=cols.kernel_rel_sq_err,
        theory=_theory_rel_mse,
        description="mean over pairs of E[((K_hat - K)/K)^2]",
    ),
    _default_metric(
        "bias",
        _KA,
        "err",
        better="zero",
        compute=_both(cols.kernel_err, "err"),
        description="mean over pairs of E[K_hat - K]",
    ),
    _default_metric(
        "rel_bias",
        _K,
        "rel_err",
        better="zero",
        compute=cols.kernel_rel_err,
        description="mean over pairs of E[(K_hat - K)/K]",
    ),
    _default_metric(
        "variance",
        _KA,
        "sq_dev",
        compute=_both(cols.kernel_sq_dev, "sq_dev"),
        ddof=1,  # the mean squared deviation from the mean over trials, times T/(T-1)
        description="mean over pairs of Var[K_hat] (divisor T-1)",
    ),
    _default_metric(
        "mean_rel_err",
        _K,
        "abs_rel_err",
        compute=cols.kernel_abs_rel_err,
        description="mean over pairs of E|K_hat - K|/K",
    ),
    _default_metric(
        "max_rel_err",
        _K,
        "max_rel_err",
        compute=cols.kernel_max_rel_err,
        description="E[max over pairs of |K_hat - K|/K]",
    ),
    _default_metric(
        "median_rel_sq_err",
        _K,
        "med_rel_sq_err",
        compute=cols.kernel_med_rel_sq_err,
        default=False,  # added after the defaults were fixed: designs naming none keep their hash
        description=(
            "E[median over pairs of ((K_hat - K)/K)^2] (robust to the few pairs whose error dominates the mean)"
        ),
    ),
    # attention designs: errors of the output against exact softmax attention
    _default_metric(
        "mean_abs_err",
        _A,
        "abs_err",
        compute=cols.attention_column("abs_err"),
        description="mean over queries and value dims of E|A_hat - A|",
    ),
    _default_metric(
        "max_abs_err",
        _A,
        "max_abs_err",
        compute=cols.attention_column("max_abs_err"),
        description="E[max over queries and value dims of |A_hat - A|]",
    ),
    _default_metric(
        "nonpositive_rows",
        _A,
        "nonpositive_rows",
        compute=cols.attention_column("nonpositive_rows"),
        description="mean number of rows with a non-positive normaliser",
    ),
    # concentration designs: Blackwelder (2024), Thm 3.3
    _default_metric(
        "coverage",
        _C,
        "covered",
        better="higher",
        compute=cols.covered,
        proportion=True,
        description="fraction of data sets where max_ij sqrt(MSE)/SM <= the bound (theorem: >= p)",
    ),
    _default_metric(
        "rms_over_bound",
        _C,
        "rms_over_bound",
        compute=cols.rms_over_bound,
        description="mean over data sets of max_ij sqrt(MSE)/SM divided by the bound",
    ),
    _default_metric(
        "realized_exceeds",
        _C,
        "realized_exceeds",
        compute=cols.realized_exceeds,
        proportion=True,
        description="fraction of data sets where one draw's max realised relative error exceeds the bound",
    ),
    # drop-in designs: how far a pretrained model's outputs move when an estimator replaces its attention
    _default_metric(
        "kl",
        _D,
        "kl",
        description="mean over positions of KL(exact || approx) of the causal decoder's next-token distribution (nats)",
    ),
    _default_metric(
        "top1_agree",
        _D,
        "top1_agree",
        better="higher",
        description="share of positions where the causal decoder's most likely next token is unchanged",
    ),
    _default_metric(
        "ppl_ratio",
        _D,
        "ppl_ratio",
        description="perplexity of the causal decoder on the texts with the estimator / with exact attention",
    ),
    _default_metric(
        "emb_cos",
        _D,
        "emb_cos",
        better="higher",
        description="mean over texts of the cosine similarity of the encoder's sentence embedding with the exact one",
    ),
    _default_metric(
        "hidden_cos",
        _D,
        "hidden_cos",
        better="higher",
        description="mean over tokens of the cosine similarity of the encoder's last hidden states with the exact ones",
    ),
    _default_metric(
        "dec_head_mse",
        _D,
        "dec_head_mse",
        description="mean over the causal decoder's replaced layers and heads of the attention-output MSE of the "
        "estimator on the exact model's q, k, v (the per-head MSE of the real-attention study)",
    ),
    _default_metric(
        "enc_head_mse",
        _D,
        "enc_head_mse",
        description="mean over the encoder's replaced layers and heads of the attention-output MSE of the "
        "estimator on the exact model's q, k, v",
    ),
):
    register_metric(_metric)
