"""Studies on arrays of your own: ``source = "arrays"`` from an ``.npz`` file or from memory."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import rfkit.study as st
from rfkit.exceptions import DataChecksumError

_R = np.random.default_rng(20261128)
Q = 0.4 * _R.normal(size=(2, 1, 2, 8, 4))  # (texts, layers, heads, n, d), as rk.data.minilm_qk
K = 0.4 * _R.normal(size=Q.shape)
V = _R.normal(size=(*Q.shape[:-1], 3))


def _design(**data: Any) -> st.Design:
    return st.Design(
        name="own",
        kind="attention",
        trials=3,
        seed=5,
        data={"source": "arrays", "heads": [0, 1], **data},
        grid={"feature_dim": [8]},
        estimators=[{"estimator": "RFA", "map": "Positive"}],
    )


def _numbers(res: Any) -> pd.DataFrame:
    df = res.trials
    return df[[c for c in df.columns if "second" not in c and "time" not in c]]


def _npz(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / "qk.npz"
    np.savez(path, **arrays)
    return path


def test_file_and_memory_give_the_same_study(tmp_path: Path) -> None:
    path = _npz(tmp_path, q=Q, k=K, v=V)
    from_file = st.run(_design(file=str(path)))
    from_memory = st.run(_design(), data={"q": Q, "k": K, "v": V})
    pd.testing.assert_frame_equal(_numbers(from_file), _numbers(from_memory))
    assert set(from_file.trials["head"]) == {0, 1}
    assert from_file.provenance["data_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert from_file.provenance["design"]["data"]["sha256"] == from_file.provenance["data_sha256"]
    assert len(from_memory.provenance["data_sha256"]) == 64
    # an object with q/k/v attributes (as rk.data.minilm_qk's result) is the same data
    obj = type("QKV", (), {"q": Q, "k": K, "v": V, "mask": None})()
    assert st.run(_design(), data=obj).provenance["data_sha256"] == from_memory.provenance["data_sha256"]


def test_mask_drops_the_tokens_it_does_not_keep() -> None:
    mask = np.ones(Q.shape[:-1], dtype=bool)
    mask[..., -2:] = False
    masked = st.run(_design(), data={"q": Q, "k": K, "v": V, "mask": mask})
    trimmed = st.run(_design(), data={"q": Q[..., :-2, :], "k": K[..., :-2, :], "v": V[..., :-2, :]})
    pd.testing.assert_frame_equal(_numbers(masked), _numbers(trimmed))


def test_without_values_the_cells_draw_them() -> None:
    a = st.run(_design(), data={"q": Q, "k": K})
    b = st.run(_design(), data={"q": Q, "k": K})
    pd.testing.assert_frame_equal(_numbers(a), _numbers(b))  # from the cells' data streams
    assert np.isfinite(a.trials["err"]).all()


def test_resume_with_a_changed_file_is_refused(tmp_path: Path) -> None:
    path = _npz(tmp_path, q=Q, k=K, v=V)
    out = tmp_path / "run"
    st.run(_design(file=str(path)), out=out, keep_parts=True)
    again = st.run(_design(file=str(path)), out=out, resume=True)  # the same file: resumed
    assert again.provenance["data_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    _npz(tmp_path, q=Q, k=K, v=V + 1.0)
    with pytest.raises(DataChecksumError, match="cannot resume") as info:
        st.run(_design(file=str(path)), out=out, resume=True)
    assert hashlib.sha256(path.read_bytes()).hexdigest() in str(info.value)


def test_resume_with_other_arrays_in_memory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    st.run(_design(), data={"q": Q, "k": K, "v": V}, out=out)
    with pytest.raises(DataChecksumError, match="cannot resume"):
        st.run(_design(), data={"q": Q, "k": K, "v": -V}, out=out, resume=True)


def test_a_pinned_sha256_is_checked(tmp_path: Path) -> None:
    path = _npz(tmp_path, q=Q, k=K, v=V)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert st.run(_design(file=str(path), sha256=sha)).provenance["data_sha256"] == sha
    with pytest.raises(DataChecksumError, match="data.sha256"):
        st.run(_design(file=str(path), sha256="0" * 64))
