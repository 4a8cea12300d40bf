"""Verified caches of real-model extractions: a damaged entry, or one holding another request's
arrays, is reported by path and rebuilt; a folder that cannot be written is reported as such."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rfkit.data as rd
from rfkit.data import _cache
from rfkit.exceptions import CacheNotWritableWarning, DamagedCacheWarning

TEXTS = ["Call me Ishmael.", "It was a dark night."]


def _minilm(cache: Path, texts: list[str] = TEXTS) -> Any:
    return rd.minilm_qk(texts, layers=[0], heads=[1], cache=cache)


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
    _cache.write_arrays(path, {"a": np.arange(3.0)}, key="k")
    _cache.checksum_path(path).write_bytes(b"\xff\xfe\x00")
    with pytest.warns(DamagedCacheWarning, match="x.npz"):
        assert _cache.read_arrays(path, ("a",), key="k") is None


def test_round_trip_and_digest_covers_dtype_and_shape(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    _cache.write_arrays(path, {"a": np.arange(6.0), "b": np.ones(2, bool)}, key="k")
    got = _cache.read_arrays(path, ("a", "b"), key="k")
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
                _cache.write_arrays(path, arrays, key="k")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=write) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    got = _cache.read_arrays(path, ("a",), key="k")
    assert got is not None and np.array_equal(got["a"], arrays["a"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz", "x.npz.sha256"]  # no temporary left


OTHER_TEXTS = ["A different passage.", "And one more."]


@pytest.mark.parametrize("extract", [_minilm, _smollm2], ids=["minilm", "smollm2"])
def test_an_entry_copied_over_another_is_not_returned_for_the_wrong_texts(
    extract: Callable[..., Any], tmp_path: Path
) -> None:
    # the entry of TEXTS (arrays and checksum, both intact) copied over the entry of OTHER_TEXTS
    first = extract(tmp_path)
    (mine,) = tmp_path.glob("*.npz")
    other = (
        rd.minilm_qk(OTHER_TEXTS, layers=[0], heads=[1], cache=tmp_path)
        if extract is _minilm
        else (rd.smollm2_qk(OTHER_TEXTS, layers=[0], heads=[0], cache=tmp_path))
    )
    (theirs,) = set(tmp_path.glob("*.npz")) - {mine}
    shutil.copyfile(mine, theirs)
    shutil.copyfile(_cache.checksum_path(mine), _cache.checksum_path(theirs))
    again_call = (
        (lambda: rd.minilm_qk(OTHER_TEXTS, layers=[0], heads=[1], cache=tmp_path))
        if extract is _minilm
        else (lambda: rd.smollm2_qk(OTHER_TEXTS, layers=[0], heads=[0], cache=tmp_path))
    )
    with pytest.warns(DamagedCacheWarning, match=f"(?s){theirs.name}.*another request"):
        again = again_call()
    assert again.tokens == other.tokens and again.tokens != first.tokens
    for name in ("q", "k", "v", "attention", "mask"):
        np.testing.assert_array_equal(getattr(again, name), getattr(other, name))
    np.testing.assert_array_equal(again_call().q, other.q)  # rebuilt: a clean hit, no warning
    np.testing.assert_array_equal(extract(tmp_path).q, first.q)  # the source entry is untouched


def test_read_compares_the_key_stored_in_the_entry(tmp_path: Path) -> None:
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    _cache.write_arrays(a, {"x": np.arange(3.0)}, key="texts A")
    shutil.copyfile(a, b)
    shutil.copyfile(_cache.checksum_path(a), _cache.checksum_path(b))
    with pytest.warns(DamagedCacheWarning, match="b.npz"):
        assert _cache.read_arrays(b, ("x",), key="texts B") is None
    got = _cache.read_arrays(a, ("x",), key="texts A")
    assert got is not None and got["x"].tolist() == [0.0, 1.0, 2.0]
    # the arrays of another entry under this entry's checksum file: their digest does not match
    _cache.write_arrays(b, {"x": np.arange(4.0)}, key="texts B")
    shutil.copyfile(a, b)
    with pytest.warns(DamagedCacheWarning, match="b.npz"):
        assert _cache.read_arrays(b, ("x",), key="texts B") is None


def test_a_checksum_file_of_an_older_rfkit_is_recomputed_silently(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    arrays = {"a": np.arange(3.0)}
    np.savez(path, **arrays)
    _cache.checksum_path(path).write_text(_cache.arrays_digest(arrays))  # the digest alone, no key
    assert _cache.read_arrays(path, ("a",), key="k") is None


def test_a_cache_folder_that_is_a_file_is_reported_as_not_writable(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.write_text("not a folder")
    with pytest.warns(
        CacheNotWritableWarning, match=r"(?s)Could not write.*cache.*is a file, not a folder"
    ) as got:
        first = _minilm(folder)
    assert not [w for w in got if issubclass(w.category, DamagedCacheWarning)]
    assert "damaged" not in str(got[0].message)
    np.testing.assert_array_equal(first.q, _minilm(tmp_path / "ok").q)


def test_a_cache_folder_without_write_permission_is_reported_as_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:  # what a read-only folder answers (root ignores modes)
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(_cache.tempfile, "mkstemp", refused)
    with pytest.warns(
        CacheNotWritableWarning, match=r"(?s)Could not write.*x\.npz.*Permission denied"
    ) as got:
        _cache.write_arrays(tmp_path / "x.npz", {"a": np.arange(3.0)}, key="k")
    assert len(got) == 1 and "damaged" not in str(got[0].message)
    assert not CacheNotWritableWarning.__mro__[1:].count(DamagedCacheWarning)  # a class of its own
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_cache_folder_is_not_called_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.npz"
    _cache.write_arrays(path, {"a": np.arange(3.0)}, key="k")
    real_open = open

    def refused(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).startswith(str(tmp_path)):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refused)
    assert _cache.read_arrays(path, ("a",), key="k") is None  # a miss, no DamagedCacheWarning
