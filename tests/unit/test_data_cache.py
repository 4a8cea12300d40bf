"""Verified caches of real-model extractions: a damaged entry is reported by path and rebuilt."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rfkit.data as rd
from rfkit.data import _cache
from rfkit.exceptions import DamagedCacheWarning

TEXTS = ["Call me Ishmael.", "It was a dark night."]


def _minilm(cache: Path) -> Any:
    return rd.minilm_qk(TEXTS, layers=[0], heads=[1], cache=cache)


def _smollm2(cache: Path) -> Any:
    return rd.smollm2_qk(TEXTS, layers=[0], heads=[0], cache=cache)


def _replace_with_nan(path: Path) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["q"] = np.full_like(arrays["q"], np.nan)
    np.savez(path, **arrays)


def _replace_with_other_numbers(path: Path) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["k"] = arrays["k"] * 1.5
    np.savez(path, **arrays)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("extract", [_minilm, _smollm2], ids=["minilm", "smollm2"])
@pytest.mark.parametrize(
    "damage", [_replace_with_nan, _replace_with_other_numbers, _truncate], ids=["nan", "numbers", "truncated"]
)
def test_a_damaged_entry_is_reported_by_path_and_rebuilt(
    extract: Callable[[Path], Any], damage: Callable[[Path], None], tmp_path: Path
) -> None:
    first = extract(tmp_path)
    (path,) = tmp_path.glob("*.npz")
    assert _cache.checksum_path(path).exists()
    damage(path)
    with pytest.warns(DamagedCacheWarning, match=path.name):
        again = extract(tmp_path)
    for name in ("q", "k", "v", "attention", "mask"):
        np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
    third = extract(tmp_path)  # rebuilt: a clean hit, no warning (warnings are errors here)
    np.testing.assert_array_equal(third.q, first.q)


def test_an_entry_without_checksum_is_recomputed_silently(tmp_path: Path) -> None:
    first = _minilm(tmp_path)
    (path,) = tmp_path.glob("*.npz")
    _cache.checksum_path(path).unlink()
    np.testing.assert_array_equal(_minilm(tmp_path).q, first.q)
    assert _cache.checksum_path(path).exists()


def test_a_checksum_file_that_is_not_utf8_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    _cache.write_arrays(path, {"a": np.arange(3.0)})
    _cache.checksum_path(path).write_bytes(b"\xff\xfe\x00")
    with pytest.warns(DamagedCacheWarning, match="x.npz"):
        assert _cache.read_arrays(path, ("a",)) is None


def test_round_trip_and_digest_covers_dtype_and_shape(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    _cache.write_arrays(path, {"a": np.arange(6.0), "b": np.ones(2, bool)})
    got = _cache.read_arrays(path, ("a", "b"))
    assert got is not None and got["a"].tolist() == list(range(6))
    a = np.arange(6.0)
    assert _cache.arrays_digest({"a": a}) != _cache.arrays_digest({"a": a.reshape(2, 3)})
    assert _cache.arrays_digest({"a": a}) != _cache.arrays_digest({"a": a.astype(np.float32)})


def test_concurrent_writers_leave_one_valid_entry(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    arrays = {"a": np.arange(20000.0)}
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(5):
                _cache.write_arrays(path, arrays)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=write) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    got = _cache.read_arrays(path, ("a",))
    assert got is not None and np.array_equal(got["a"], arrays["a"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz", "x.npz.sha256"]  # no temporary left
