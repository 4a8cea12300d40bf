"""The rule "an int >= 1" has one wording everywhere: the scalar helpers of ``rfkit._params``.

Each entry point below checks a count of its own; every one must refuse 0 (and a non-integer)
with ``InvalidParameterError`` saying "The `<arg>` parameter of <owner> must be an int in the
range [1, ...]. Got <value> instead.", and accept a NumPy integer like a Python int.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.data import long_passages
from rfkit.exceptions import InvalidParameterError
from rfkit.study.summaries import proxy_correlation

_DESIGN = st.Design(
    name="t",
    estimators=[{"map": "Positive"}],
    grid={"n_features": [2]},
    data={"source": "pairs", "n_pairs": 3, "dim": 2},
    trials=4,
    seed=1,
)


def _attention(Q, K, V, *, rng=None, n_draws=None):  # pragma: no cover - never called
    return rk.attention.softmax(Q, K, V)


CASES = [
    ("run-trials", lambda bad: st.run(_DESIGN, trials=bad, progress=False), "trials", "rk.study.run"),
    ("run-workers", lambda bad: st.run(_DESIGN, workers=bad, progress=False), "workers", "rk.study.run"),
    (
        "proxy_correlation-n_boot",
        lambda bad: proxy_correlation(pd.DataFrame(), [], n_boot=bad),
        "n_boot",
        "proxy_correlation",
    ),
    (
        "proxy_correlation-n_perm",
        lambda bad: proxy_correlation(pd.DataFrame(), [], n_perm=bad),
        "n_perm",
        "proxy_correlation",
    ),
    ("long_passages-n_texts", lambda bad: long_passages(bad), "n_texts", "long_passages"),
    (
        "check_feature_map-dim",
        lambda bad: rk.features.check_feature_map(rk.features.Positive(4), dim=bad),
        "dim",
        "check_feature_map",
    ),
    (
        "check_attention_estimator-dim",
        lambda bad: rk.attention.check_attention_estimator(_attention, dim=bad),
        "dim",
        "check_attention_estimator",
    ),
]


@pytest.mark.parametrize("call, arg, owner", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("bad, shown", [(0, "0"), (1.5, "1.5"), (True, "True")])
def test_an_int_below_one_or_a_non_int_gets_the_one_wording(call, arg, owner, bad, shown):
    with pytest.raises(InvalidParameterError) as info:
        call(bad)
    msg = str(info.value)
    assert f"The `{arg}` parameter of {owner} must be an int in the range [1, " in msg, msg
    assert f"Got {shown} instead." in msg, msg


def test_a_numpy_integer_counts_like_an_int():
    assert long_passages(np.int64(2)) == long_passages(2)
