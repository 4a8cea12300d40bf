"""Softmax attention and its random-feature / Monte Carlo estimators.

Conventions (docs page *Attention estimators*, "Conventions"): attention is :math:`\\mathrm{softmax}(QK^\\top)V` with no
hidden :math:`1/\\sqrt d` (scale ``Q`` and ``K`` yourself); points are rows,
``Q`` (..., n, d), ``K`` (..., M, d), ``V`` (..., M, dv); leading axes (batch,
heads) broadcast; randomness only through the keyword-only ``rng``.

=====================  ==========================================================  ==========
estimator              what it is                                                   cost
=====================  ==========================================================  ==========
:func:`softmax`        exact, max-shifted, chunked over queries                     O(n M d)
:class:`RFA`           linear attention with any feature map (bi- and causal)       O((n+M) m d)
:class:`RA`            randomized attention (Zheng et al. 2022), unbiased           O(n M S d)
:class:`SNIS`          RFA as self-normalised importance sampling, N(mu, I)         O((n+M) S d)
:class:`LARA`          linear randomized attention, multiple importance sampling    O((n+M) C k d)
=====================  ==========================================================  ==========

:class:`Hybrid` with keys by content splits a budget of exact logits between a window, sinks, top-k
keys and samples; :func:`calibrate_split` chooses the split per head on calibration data and
returns a :class:`HybridPerHead`.

:func:`check_attention_estimator` checks an estimator of your own (or rfkit's) against the
protocol, on a small probe and at the sizes a study uses.
"""

from ._calibrate import HybridPerHead, calibrate_split
from ._conformance import check_attention_estimator
from ._exact import softmax
from ._hybrid import Hybrid
from ._lara import LARA
from ._ra import RA
from ._result import AttentionResult, QueryCost
from ._rfa import RFA
from ._snis import SNIS

__all__ = [
    "softmax",
    "AttentionResult",
    "RFA",
    "RA",
    "SNIS",
    "LARA",
    "Hybrid",
    "HybridPerHead",
    "calibrate_split",
    "QueryCost",
    "check_attention_estimator",
]
