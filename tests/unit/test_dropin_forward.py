"""Forward passes with an ``attention=`` hook (rfkit.data.smollm2_forward, minilm_forward, the models).

These tests need both weights packages (``make install``). Without them they FAIL, on purpose:
they never skip.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rfkit as rk
import rfkit.data as rd
from rfkit.data import _smollm
from rfkit.exceptions import InvalidParameterError, ShapeError

REF = np.load(Path(__file__).resolve().parents[1] / "reference" / "data" / "smollm2_reference.npz")
REF_TEXTS = tuple(str(t) for t in REF["texts"])
TEXTS = ("Call me Ishmael. Some years ago, never mind how long precisely.", "It was the best of times.")


def rfkit_softmax(q, k, v, *, causal, layer, key_padding_mask):
    """Exact attention through rfkit's own softmax (another implementation than the models')."""
    del layer
    return rk.attention.softmax(q, k, v, causal=causal, key_padding_mask=key_padding_mask)


def favor(causal: bool, m: int = 16) -> rk.attention.RFA:
    return rk.attention.RFA(rk.features.Positive(m, projection="orthogonal"), causal=causal)


# --------------------------------------------------------------------------- the default is today's model


def test_smollm2_default_is_the_unhooked_model_bit_for_bit() -> None:
    r = rd.smollm2_forward(REF_TEXTS[:2], max_len=None)
    logits, mask = _smollm._logits(REF_TEXTS[:2])  # the full model without any hook (padded batch)
    np.testing.assert_array_equal(r.mask, mask)
    np.testing.assert_array_equal(r.logits[mask], logits[mask])
    assert r.layers == () and np.all(r.logits[~mask] == 0)
    for i in range(2):  # and Hugging Face transformers' logits of the same file
        n = int(REF["lengths"][i])
        np.testing.assert_allclose(r.logits[i, :n][:, REF["vocab_ids"]], REF[f"logits{i}"], atol=1e-3, rtol=0)


def test_exact_attention_hook_is_bit_identical_to_no_hook() -> None:
    a = rd.smollm2_forward(TEXTS)  # padded: the second text is shorter
    b = rd.smollm2_forward(TEXTS, attention=rd.exact_attention)
    np.testing.assert_array_equal(a.logits[a.mask], b.logits[b.mask])
    assert b.layers == tuple(range(30))
    e = rd.minilm_forward(TEXTS)
    f = rd.minilm_forward(TEXTS, attention=rd.exact_attention)
    np.testing.assert_array_equal(e.hidden, f.hidden)
    np.testing.assert_array_equal(e.embedding, f.embedding)


def test_minilm_default_embedding_is_embed_bit_for_bit() -> None:
    texts = ["This is an example sentence", "Each sentence is converted"]
    r = rd.minilm_forward(texts)
    np.testing.assert_array_equal(r.embedding, rd.embed(texts))
    np.testing.assert_allclose(r.embedding[0, :4], [0.0676569, 0.0634959, 0.0487131, 0.0793049], atol=1e-7)


def test_rfkit_softmax_hook_gives_the_same_outputs_to_1e_10() -> None:
    a = rd.smollm2_forward(TEXTS)
    b = rd.smollm2_forward(TEXTS, attention=rfkit_softmax)  # grouped-query k, v: repeated per query head
    np.testing.assert_allclose(b.logits[b.mask], a.logits[a.mask], atol=1e-10, rtol=0)
    e = rd.minilm_forward(TEXTS)  # padded: key_padding_mask reaches the hook
    f = rd.minilm_forward(TEXTS, attention=rfkit_softmax)
    np.testing.assert_allclose(f.hidden, e.hidden, atol=1e-10, rtol=0)


def test_hook_sees_scaled_qkv_with_grouped_query_heads() -> None:
    seen = {}

    def spy(q, k, v, *, causal, layer, key_padding_mask):
        seen[layer] = (q.shape, k, causal, key_padding_mask)
        return rd.exact_attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)

    rd.smollm2_forward(TEXTS, attention=spy, layers=[0, 7])
    assert sorted(seen) == [0, 7]
    shape, k, causal, pad = seen[7]
    assert shape == (2, 9, k.shape[2], 64) and causal is True
    for g in range(3):  # query heads 3g, 3g+1, 3g+2 read key/value head g
        np.testing.assert_array_equal(k[:, 3 * g], k[:, 3 * g + 2])
    assert pad.shape == (2, 1, k.shape[2]) and pad[1].any() and not pad[0].any()
    q_ref = rd.smollm2_qk(TEXTS[0], layers=[7], heads=[0], max_len=64, cache=False).q[0, 0, 0]
    spy_q = {}  # the hook's q is the extraction's q (q . k is the logit): the same forward pass

    def spy_values(q, k, v, *, causal, layer, key_padding_mask):
        spy_q["q"] = q
        return rd.exact_attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)

    rd.smollm2_forward(TEXTS[0], attention=spy_values, layers=7)
    np.testing.assert_array_equal(spy_q["q"][0, 0], q_ref)


# --------------------------------------------------------------------------- estimators as hooks


def test_estimator_attention_is_reproducible_per_seed_and_differs_across_seeds() -> None:
    a = rd.minilm_forward(TEXTS, attention=rd.estimator_attention(favor(False), rng=5))
    b = rd.minilm_forward(TEXTS, attention=rd.estimator_attention(favor(False), rng=5))
    c = rd.minilm_forward(TEXTS, attention=rd.estimator_attention(favor(False), rng=6))
    np.testing.assert_array_equal(a.hidden, b.hidden)
    assert not np.allclose(a.hidden, c.hidden)
    exact = rd.minilm_forward(TEXTS)
    assert np.all(rd.cosine_similarity(a.embedding, exact.embedding) < 0.999)


def test_estimator_attention_uses_a_distinct_stream_per_layer() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (0.3 * rng.standard_normal((1, 2, 8, 4)) for _ in range(3))
    hook = rd.estimator_attention(favor(False, m=8), rng=11)
    out0 = hook(q, k, v, causal=False, layer=0, key_padding_mask=None)
    out1 = hook(q, k, v, causal=False, layer=1, key_padding_mask=None)
    again = hook(q, k, v, causal=False, layer=0, key_padding_mask=None)
    np.testing.assert_array_equal(out0, again)  # a fresh generator from layer 0's stream every call
    assert not np.allclose(out0, out1)
    # layer l draws from SeedSequence(root.entropy, spawn_key=root.spawn_key + (l,)), whatever else runs
    direct = favor(False, m=8)(q, k, v, rng=np.random.SeedSequence(11, spawn_key=(1,))).output
    np.testing.assert_array_equal(out1, direct)
    assert rd.layer_stream(hook.root, 3).spawn_key == (3,)


def test_one_layer_run_restarted_from_its_exact_input_equals_the_full_run() -> None:
    # what the drop-in study's one-layer mode does: start at layer 4 from the exact model's input
    m = rd.SmolLM2Model()
    ids, mask = m.encode(TEXTS[0], max_len=24)
    hook = rd.estimator_attention(favor(True), rng=np.random.SeedSequence(3))
    exact = m.run(ids, mask, keep_inputs=True)
    assert exact.inputs is not None and len(exact.inputs) == 30
    full = m.run(ids, mask, attention=hook, layers=[4])
    restarted = m.run(ids, mask, attention=hook, layers=[4], start=4, x=exact.inputs[4])
    np.testing.assert_array_equal(restarted.hidden, full.hidden)
    assert not np.allclose(full.hidden, exact.hidden)


def test_one_layer_replaced_changes_the_logits_and_only_after_it() -> None:
    exact = rd.smollm2_forward(TEXTS[0], max_len=16)
    one = rd.smollm2_forward(
        TEXTS[0], max_len=16, attention=rd.estimator_attention(favor(True), rng=1), layers=29
    )
    kl = rd.next_token_kl(exact.logits[0], one.logits[0])
    assert np.all(kl >= -1e-12) and kl.mean() > 1e-6
    assert one.layers == (29,)


def test_model_run_restarts_from_a_layer_input_and_stops_early() -> None:
    m = rd.MiniLMModel()
    ids, mask = m.encode(TEXTS, max_len=16)
    full = m.run(ids, mask, keep_inputs=True)
    assert full.inputs is not None and len(full.inputs) == 6
    again = m.run(ids, mask, start=3, x=full.inputs[3])
    np.testing.assert_array_equal(again.hidden, full.hidden)
    part = m.run(ids, mask, stop=3)
    np.testing.assert_array_equal(part.hidden, full.inputs[3])
    s = rd.SmolLM2Model(np.float32)
    ids, mask = s.encode(TEXTS[1])
    r = s.run(ids, mask)
    assert r.hidden.dtype == np.float32 and s.logits(r.hidden).shape == (1, ids.shape[1], 49152)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("layers", [30, -1, [0, 0], [], "all", 2.0, True])
def test_unknown_layer_index_raises(layers) -> None:
    with pytest.raises(InvalidParameterError, match="layers"):
        rd.smollm2_forward(TEXTS[1], attention=rd.exact_attention, layers=layers)


def test_minilm_layer_out_of_range_raises() -> None:
    with pytest.raises(InvalidParameterError, match=r"\[0, 5\]"):
        rd.minilm_forward(TEXTS[1], attention=rd.exact_attention, layers=[6])


def test_layers_without_attention_raises() -> None:
    with pytest.raises(InvalidParameterError, match="attention"):
        rd.minilm_forward(TEXTS[1], layers=[0])


@pytest.mark.parametrize("bad", [rk.attention.RFA, 3, "softmax"])
def test_bad_estimator_or_hook_raises(bad) -> None:
    with pytest.raises(InvalidParameterError, match="estimator"):
        rd.estimator_attention(bad, rng=0)
    with pytest.raises(InvalidParameterError, match="attention"):
        rd.minilm_forward(TEXTS[1], attention=bad)


def test_estimator_with_the_wrong_causality_raises() -> None:
    with pytest.raises(InvalidParameterError, match="causal=True"):
        rd.smollm2_forward(TEXTS[1], attention=rd.estimator_attention(favor(False), rng=0))
    with pytest.raises(InvalidParameterError, match="causal=False"):
        rd.minilm_forward(TEXTS[1], attention=rd.estimator_attention(favor(True), rng=0))


def test_estimator_not_returning_an_attention_result_raises() -> None:
    def plain(Q, K, V, *, rng=None, key_padding_mask=None):
        return V

    with pytest.raises(InvalidParameterError, match="AttentionResult"):
        rd.minilm_forward(TEXTS[1], attention=rd.estimator_attention(plain, rng=0))


def test_hook_with_the_wrong_output_shape_raises() -> None:
    def wrong(q, k, v, **kw):
        return v[..., :-1, :]

    with pytest.raises(ShapeError, match="attention"):
        rd.minilm_forward(TEXTS[1], attention=wrong)


def test_model_run_argument_checks() -> None:
    m = rd.MiniLMModel()
    ids, mask = m.encode(TEXTS[1])
    with pytest.raises(InvalidParameterError, match="start"):
        m.run(ids, mask, start=2)
    with pytest.raises(InvalidParameterError, match="stop"):
        m.run(ids, mask, stop=0)
    with pytest.raises(ShapeError, match="x"):
        m.run(ids, mask, start=1, x=np.zeros((1, 3, 384)))
    with pytest.raises(ShapeError, match="ids"):
        m.run(ids.astype(float), mask)
    with pytest.raises(InvalidParameterError, match="prefix"):
        m.run(ids, ~mask)
    with pytest.raises(InvalidParameterError, match="scale"):
        rd.MiniLMModel(scale="half")
    with pytest.raises(InvalidParameterError, match="dtype"):
        rd.smollm2_forward(TEXTS[1], dtype=np.int64)
