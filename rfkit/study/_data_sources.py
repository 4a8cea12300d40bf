"""rfkit's data sources for studies, registered with :func:`~rfkit.study.register_data_source`.

Each factory takes the cell's data parameters (without ``source`` and ``dataset``) and a
Generator on the cell's data stream, and returns paired rows ``(X, Y)`` or a sequence
``(Q, K, V)``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import data as rkdata
from ..exceptions import InvalidParameterError
from ._data_arrays import arrays_dim, arrays_factory
from ._dropin_data import dropin_factory
from ._dropin_design import DROPIN_PARAMS, dropin_model_dim
from ._records import DataSourceRecord, register_data_source

__all__: list[str] = []


def _pairs(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = p.pop("n_pairs", 64)
    norm = p.pop("norm", None)
    nx = p.pop("norm_x", 1.0 if norm is None else norm)
    ny = p.pop("norm_y", 1.0 if norm is None else norm)
    return rkdata.pairs_with_norms(
        n, p.pop("dim"), norm_x=nx, norm_y=ny, cosine=p.pop("cosine", None), rng=gen
    )


def _gaussian(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = p.pop("n_pairs", 64)
    sq, sk = p.pop("scale_q", 1.0), p.pop("scale_k", 1.0)
    s = rkdata.gaussian_qk(n, p.pop("dim"), rng=gen, **p)
    return sq * s.q, sk * s.k


def _hard(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = p.pop("n_pairs", 64)
    s = rkdata.hard_qk(n, p.pop("dim"), rng=gen, **p)
    return s.q, s.k


def _benchmark(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return rkdata.kernel_benchmark_pairs(p.pop("set"), p.pop("n_pairs", 64), p.pop("dim", 32), rng=gen)


def _sequence(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    return rkdata.sequence_qkv(p.pop("n_tokens", 256), p.pop("dim"), rng=gen, **p)  # type: ignore[no-any-return]


def _model(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    """One head of a real model per cell; ``gen`` is unused (no randomness)."""
    del gen
    layer = int(p.pop("layer", (p.pop("layers", [0]) or [0])[0]))
    head = int(p.pop("head", (p.pop("heads", [0]) or [0])[0]))
    n_texts = p.pop("n_texts", None)
    which = p.pop("texts", "passages")
    pool = _TEXTS.get(which) if isinstance(which, str) else None
    if pool is None:
        raise InvalidParameterError(f"`data.texts` must be one of {sorted(_TEXTS)}. Got {which!r} instead.")
    texts = None if n_texts is None and pool is rkdata.PASSAGES else tuple(pool[: int(n_texts or len(pool))])
    q, k, v = _layer_qkv(
        bool(p.pop("causal", False)),
        texts,
        layer,
        int(p.pop("max_len", 64)),
        str(p.pop("scale", "symmetric")),
    )
    if not 0 <= head < q.shape[2]:
        raise InvalidParameterError(f"`head` = {head} is out of range: the model has {q.shape[2]} heads.")
    return q[:, 0, head].copy(), k[:, 0, head].copy(), v[:, 0, head].copy()


@functools.lru_cache(maxsize=4)
def _layer_qkv(
    causal: bool, texts: tuple[str, ...] | None, layer: int, max_len: int, scale: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v (texts, 1, heads, tokens, d) of every head of one layer of the decoder or the encoder.

    Every head of the layer, so that the cells of its other heads share one read of the cache entry
    (a head's q, k, v do not depend on which are kept); kept for the process (four layers), since
    reading and verifying the entry cost about as much as a cell's cheaper estimators. The data
    are those of the pinned weights and built-in texts, so a kept layer never goes stale; cells
    get copies of their head, never these arrays.
    """
    load = rkdata.smollm2_qk if causal else rkdata.minilm_qk  # decoder or encoder
    res = load(
        None if texts is None else list(texts), layers=[layer], heads=None, max_len=max_len, scale=scale
    )
    return res.q, res.k, res.v


#: ``[data] texts = ...`` of the real-model source: the built-in passages (64 tokens each) or the long
#: texts joined from them (rk.data.long_passages: over 1,400 tokens each, for max_len up to 1,024)
_TEXTS = {"passages": rkdata.PASSAGES, "long": rkdata.LONG_PASSAGES}


def _model_dim(p: Mapping[str, Any]) -> int:
    """Head dimension of the real models: SmolLM2-135M (causal) 64, all-MiniLM-L6-v2 32."""
    return 64 if p.get("causal", False) else 32


def _model_stats(Q: Any, K: Any, causal: bool) -> Any:
    st = rkdata.describe(Q, K, causal=causal).select_dtypes("number").drop(columns=["axis0"], errors="ignore")
    return st.mean().to_frame().T  # averaged over texts


register_data_source(
    DataSourceRecord(
        "pairs",
        _pairs,
        frozenset({"n_pairs", "dim", "norm_x", "norm_y", "norm", "cosine"}),
        description="pairs of rows with given norms and cosine (rk.data.pairs_with_norms)",
    )
)
register_data_source(
    DataSourceRecord(
        "gaussian",
        _gaussian,
        frozenset({"n_pairs", "dim", "mean_q", "cov_q", "mean_k", "cov_k", "scale_q", "scale_k"}),
        description="Gaussian queries and keys (rk.data.gaussian_qk), optionally rescaled",
    )
)
register_data_source(
    DataSourceRecord(
        "hard",
        _hard,
        frozenset(
            {"n_pairs", "dim", "regime", "mean_scale", "var_shape_q", "var_shape_k", "norm_q", "norm_k"}
        ),
        description="queries and keys of the hard regimes (rk.data.hard_qk)",
    )
)
register_data_source(
    DataSourceRecord(
        "sequence",
        _sequence,
        frozenset({"n_tokens", "dim", "d_v", "structure", "scale", "n_clusters", "spread"}),
        sequence=True,
        description="synthetic (Q, K, V) sequences (rk.data.sequence_qkv)",
    )
)
register_data_source(
    DataSourceRecord(
        "minilm",
        _model,
        frozenset(
            {"layer", "head", "layers", "heads", "n_texts", "texts", "max_len", "scale", "dim", "causal"}
        ),
        sequence=True,
        needs_dim=False,
        model_dim=_model_dim,
        plural_axes={"layers": "layer", "heads": "head"},
        causal_key="causal",
        describe=_model_stats,
        probe=False,
        description=(
            "real queries, keys and values of all-MiniLM-L6-v2 on the built-in passages (rk.data.minilm_qk; "
            "texts = 'long': the long texts joined from them, rk.data.long_passages); "
            "causal = true: those of the decoder SmolLM2-135M-Instruct (rk.data.smollm2_qk), with causal "
            "exact attention and causal = true passed to every estimator"
        ),
    )
)
register_data_source(
    DataSourceRecord(
        "benchmark",
        _benchmark,
        frozenset({"set", "n_pairs", "dim"}),
        description="the pair sets of the softmax-kernel-estimators benchmark (rk.data.kernel_benchmark_pairs)",
    )
)
register_data_source(
    DataSourceRecord(
        "passages",
        dropin_factory,
        DROPIN_PARAMS,
        needs_dim=False,
        model_dim=dropin_model_dim,
        probe=False,
        kinds=("drop-in",),
        description=(
            "drop-in designs: texts of n_tokens tokens made of the built-in passages, for the pretrained models "
            "SmolLM2-135M-Instruct and all-MiniLM-L6-v2 (rk.data.SmolLM2Model, rk.data.MiniLMModel)"
        ),
    )
)
register_data_source(
    DataSourceRecord(
        "arrays",
        arrays_factory,
        frozenset({"file", "sha256", "dim", "layer", "head", "layers", "heads", "causal"}),
        sequence=True,
        needs_dim=False,
        model_dim=arrays_dim,
        plural_axes={"layers": "layer", "heads": "head"},
        causal_key="causal",
        describe=_model_stats,
        probe=False,
        description=(
            "queries, keys (values, mask) of your own: an .npz file (file = ...) or arrays passed as "
            "rk.study.run(design, data=...), laid out (texts, layers, heads, n, d) as rk.data.minilm_qk; "
            "causal = true for a decoder's"
        ),
    )
)
