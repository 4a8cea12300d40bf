"""An attention estimator of your own with its record's hooks, in one file, as a user writes it.

The harness asks the record (never the class) how to call many trials at once and what one query
costs; rfkit's own estimators register their hooks the same way."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

import rfkit.study as st
from rfkit.exceptions import InvalidParameterError

#: the user's file: an estimator, its batched call and its cost, and one registration
MODULE = '''
import dataclasses

import numpy as np

import rfkit as rk
import rfkit.study as st
from rfkit.exceptions import InvalidParameterError

CALLS = {"batched": 0, "batched_trials": 0, "single": 0}


def _softmax_over(Q, K, V, idx):
    """Softmax attention of every query over the keys ``idx`` (..., s) of its trial."""
    Ks = np.take_along_axis(K, idx[..., None], axis=-2)
    Vs = np.take_along_axis(V, idx[..., None], axis=-2)
    logits = Q @ np.swapaxes(Ks, -1, -2)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ Vs


@dataclasses.dataclass(frozen=True)
class KeySample:
    """Softmax attention over ``samples`` keys drawn uniformly with replacement (biased, cheap)."""

    samples: int = 4

    def draw(self, n_keys, rng):
        return np.random.default_rng(rng).integers(0, n_keys, size=self.samples)

    def __call__(self, Q, K, V, *, rng, n_draws=None):
        CALLS["single"] += 1
        idx = self.draw(K.shape[-2], rng)
        out = _softmax_over(Q, K, V, np.broadcast_to(idx, (*K.shape[:-2], self.samples)))
        return rk.attention.AttentionResult(output=out, method="key-sample")


def batched(estimator, calls):
    """Every trial of the unit in one call: the trials' key draws stacked on a leading axis."""

    def call(j0, j1):
        CALLS["batched"] += 1
        CALLS["batched_trials"] += j1 - j0
        idx = np.stack([estimator.draw(calls.K.shape[-2], s) for s in calls.streams[j0:j1]])
        idx = idx.reshape((j1 - j0,) + (1,) * (calls.K.ndim - 2) + (estimator.samples,))
        idx = np.broadcast_to(idx, (j1 - j0, *calls.K.shape[:-2], estimator.samples))
        out = _softmax_over(calls.Q[None], calls.K[None], calls.V[None], idx)
        return rk.attention.AttentionResult(output=out, method="key-sample")

    return st.BatchedCall(len(calls.streams), call)


def cost(estimator, sizes):
    """Its samples, plus one key per 100 keys for the draw (a declared cost of this toy)."""
    return estimator.samples + sizes.n_keys / 100


st.register_attention_estimator(
    st.AttentionEstimatorRecord(
        "KeySample", KeySample, batched=batched, cost=cost, description="softmax over sampled keys"
    )
)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The user's file importable; the registries restored afterwards."""
    from rfkit.study import _records

    (tmp_path / "my_key_sample.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = {k: dict(v) for k, v in _records._REGISTRIES.items()}
    import my_key_sample

    yield my_key_sample
    for k, v in saved.items():
        _records._REGISTRIES[k].clear()
        _records._REGISTRIES[k].update(v)
    sys.modules.pop("my_key_sample", None)


def _design(estimators):
    return st.Design(
        name="key-sample",
        kind="attention",
        estimators=estimators,
        grid={"samples": [3, 6]},
        data={"source": "sequence", "n_tokens": 10, "dim": 4, "d_v": 2},
        trials=6,
        chunk_trials=3,
        seed=11,
        metrics=["mse"],
    )


def test_a_user_estimator_gets_its_batched_call_and_its_cost(user_module):
    design = _design(
        [
            {"label": "by-path", "estimator": "my_key_sample:KeySample"},  # module:Class, as the docs say
            {"label": "by-name", "estimator": "KeySample"},
        ]
    )
    calls = user_module.CALLS
    calls.update(batched=0, batched_trials=0, single=0)
    res = st.run(design, progress=False)
    t = res.trials
    assert (t["status"] == "ok").all()
    # both entries: 2 cells x 2 chunks, each chunk (3 trials) in one batched call: every trial
    assert calls["batched"] == 2 * 2 * 2 and calls["batched_trials"] == 2 * 2 * 6
    n_keys = 10
    expected = t["cell"].map(lambda c: design.cells()[c]["samples"]) + n_keys / 100
    np.testing.assert_array_equal(t["cost"].to_numpy(), expected.to_numpy())
    # the batched call gives trial by trial's numbers (round-off apart): the record's default loop
    rec = st.attention_estimator_record("KeySample")
    import dataclasses

    st.register_attention_estimator(dataclasses.replace(rec, batched=None), replace=True)
    calls.update(batched=0, single=0)
    single = st.run(design, progress=False)
    assert calls["batched"] == 0 and calls["single"] >= 2 * 2 * 6  # the default: one call per trial
    num = ["err", "sq_err", "abs_err", "max_abs_err", "sq_dev"]
    np.testing.assert_allclose(
        t[num].to_numpy(float), single.trials[num].to_numpy(float), rtol=1e-12, atol=1e-15
    )
    pd.testing.assert_series_equal(t["cost"], single.trials["cost"])


def test_an_estimator_without_a_cost_hook_has_no_cost(user_module):
    rec = st.attention_estimator_record("KeySample")
    import dataclasses

    st.register_attention_estimator(dataclasses.replace(rec, cost=None), replace=True)
    res = st.run(_design([{"estimator": "KeySample"}]), progress=False)
    assert res.trials["cost"].isna().all()  # not known: NaN, never a guess


def test_hooks_must_be_callables():
    with pytest.raises(
        InvalidParameterError, match="`cost` parameter of AttentionEstimatorRecord .Mine. must be a callable"
    ):
        st.AttentionEstimatorRecord("Mine", lambda Q, K, V, *, rng: None, cost=3)
