"""The ``arrays`` data source: queries, keys (values and a mask) of your own, from a file or from memory.

A design names it as ``[data] source = "arrays"`` with ``file = "qk.npz"`` (a NumPy ``.npz``
holding ``q``, ``k`` and optionally ``v`` and ``mask``), or without ``file`` when the arrays are
passed to :func:`rfkit.study.run` as ``data=``. The arrays are laid out as rfkit's real-data
sources lay theirs out (:func:`rfkit.data.minilm_qk`): ``(n, d)`` one sequence, ``(texts, n, d)``
or ``(texts, layers, heads, n, d)``; a cell gets one (layer, head) as ``(texts, n, d)``, exactly
as the ``minilm`` source's cells do. The run binds the design to the arrays' SHA-256
(``data.sha256``: of the file's bytes, or of the arrays' names, dtypes, shapes and bytes), so the
design hash, the provenance and a resume all see which data the run used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..exceptions import DataChecksumError, InvalidParameterError, NonFiniteInputError, ShapeError, StudyError

if TYPE_CHECKING:
    from ._design import Design

__all__ = ["QKArrays", "as_qk_arrays", "load_npz", "bind_arrays", "remember_arrays", "forget_arrays"]

#: the arrays the source reads, in checksum order
ARRAY_NAMES = ("q", "k", "v", "mask")
#: dimensions a ``q`` may have: (n, d), (texts, n, d), (texts, layers, heads, n, d)
_NDIMS = (2, 3, 5)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclasses.dataclass(frozen=True, eq=False)
class QKArrays:
    """Validated queries, keys, optional values and mask, with their content checksum.

    Attributes
    ----------
    q, k : ndarray
        Queries and keys, float32 or float64, shaped ``(..., n, d)`` (the same shape).
    v : ndarray or None
        Values ``(..., n, d_v)``; None: the cells draw standard-normal values.
    mask : ndarray of bool or None
        True for the tokens kept, shaped as ``q`` without its last axis (or ``(texts, n)`` for a
        5-d ``q``, as :func:`rfkit.data.minilm_qk` gives it).
    sha256 : str
        SHA-256 of the arrays' names, dtypes, shapes and bytes.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    mask: np.ndarray | None
    sha256: str


def _arrays_of(data: Any, owner: str) -> dict[str, Any]:
    if isinstance(data, Mapping) or hasattr(data, "files"):  # a mapping, or an open NpzFile
        keys = list(data.keys()) if isinstance(data, Mapping) else list(data.files)
        extra = sorted(str(k) for k in keys if k not in ARRAY_NAMES)
        if extra:
            raise InvalidParameterError(
                f"{owner} must hold only the arrays {list(ARRAY_NAMES)} (q and k required). Got {extra} as well."
            )
        return {n: data[n] for n in ARRAY_NAMES if n in keys}
    if hasattr(data, "q") and hasattr(data, "k"):  # an object with q/k arrays (rk.data.minilm_qk's result)
        return {n: getattr(data, n) for n in ARRAY_NAMES if getattr(data, n, None) is not None}
    raise InvalidParameterError(
        f"{owner} must be a mapping or an object holding arrays `q` and `k` (optionally `v` and `mask`). "
        f"Got {type(data).__name__} instead."
    )


def as_qk_arrays(data: Any, *, owner: str = "`data`") -> QKArrays:
    """``data`` (a mapping, an ``.npz`` file's contents, or an object with ``q``/``k``/``v``/``mask``) checked.

    Raises
    ------
    InvalidParameterError
        Missing ``q`` or ``k``, an unknown array name, or a dtype other than float32/float64
        (``mask``: bool).
    ShapeError
        Shapes that do not fit together, or a mask that keeps different numbers of tokens in the
        sequences of one (layer, head), or none.
    NonFiniteInputError
        A NaN or infinite value in ``q``, ``k`` or ``v``.
    """
    found = _arrays_of(data, owner)
    missing = [n for n in ("q", "k") if n not in found]
    if missing:
        raise InvalidParameterError(
            f"{owner} must hold arrays `q` and `k` (shape (..., n, d)). Got no {' or '.join(map(repr, missing))} "
            f"(arrays: {sorted(found)})."
        )
    arrs: dict[str, np.ndarray] = {}
    for name, value in found.items():
        a = np.asarray(value)
        want = "bool" if name == "mask" else "float32 or float64"
        ok = a.dtype == np.bool_ if name == "mask" else a.dtype in _FLOATS
        if not ok:
            raise InvalidParameterError(
                f"{owner}['{name}'] must have dtype {want}. Got dtype {a.dtype} instead."
            )
        arrs[name] = np.ascontiguousarray(a)
    q, k = arrs["q"], arrs["k"]
    if q.ndim not in _NDIMS or min(q.shape, default=0) < 1:
        raise ShapeError(
            f"{owner}['q'] must have shape (n, d), (texts, n, d) or (texts, layers, heads, n, d), none of them 0. "
            f"Got shape {q.shape} instead."
        )
    if k.shape != q.shape:
        raise ShapeError(f"{owner}['k'] must have the shape of `q`, {q.shape}. Got shape {k.shape} instead.")
    v = arrs.get("v")
    if v is not None and (v.ndim != q.ndim or v.shape[:-1] != q.shape[:-1] or v.shape[-1] < 1):
        raise ShapeError(
            f"{owner}['v'] must have shape {q.shape[:-1] + ('d_v',)} (one value row per key). Got shape {v.shape} instead."
        )
    for name in ("q", "k", "v"):
        x = arrs.get(name)
        if x is not None and not np.all(np.isfinite(x)):
            bad = np.argwhere(~np.isfinite(x))
            raise NonFiniteInputError(
                f"{owner}['{name}'] must be finite. Got {len(bad)} NaN or infinite value(s), the first at index "
                f"{tuple(int(i) for i in bad[0])}: {x[tuple(bad[0])]!r}."
            )
    mask = arrs.get("mask")
    if mask is not None:
        forms = [q.shape[:-1]] + ([(q.shape[0], q.shape[-2])] if q.ndim == 5 else [])
        if mask.shape not in forms:
            raise ShapeError(
                f"{owner}['mask'] must have shape {' or '.join(map(str, forms))} (True: a token kept). "
                f"Got shape {mask.shape} instead."
            )
        kept = mask.sum(axis=-1)
        if kept.min() < 1 or (kept.ndim and np.unique(kept.reshape(kept.shape[0], -1), axis=0).shape[0] > 1):
            raise ShapeError(
                f"{owner}['mask'] must keep at least one token, and the same number in every text (a cell's "
                f"sequences are one array); trim or split the texts. Got kept-token counts {np.unique(kept).tolist()}."
            )
    h = hashlib.sha256()
    for name in ARRAY_NAMES:
        x = arrs.get(name)
        if x is not None:
            h.update(json.dumps([name, x.dtype.str, list(x.shape)]).encode())
            h.update(x.tobytes())
    return QKArrays(q, k, v, mask, h.hexdigest())


def load_npz(path: str | Path, *, owner: str = "`data.file`") -> tuple[QKArrays, str]:
    """The arrays of an ``.npz`` file, checked as :func:`as_qk_arrays` does, and the file's SHA-256.

    Raises
    ------
    InvalidParameterError
        A file that is missing or not a NumPy ``.npz`` archive (pickled objects are refused), and
        the errors of :func:`as_qk_arrays`.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InvalidParameterError(
            f"{owner} must be a readable .npz file holding q and k. Got {str(path)!r} ({type(exc).__name__}: "
            f"{exc.strerror or exc})."
        ) from None
    file_sha = hashlib.sha256(raw).hexdigest()
    try:
        with np.load(p, allow_pickle=False) as npz:
            if not hasattr(npz, "files"):
                raise ValueError("a single array (.npy), not an archive")
            arrays = as_qk_arrays(npz, owner=f"{owner} {str(path)!r}")
    except (ValueError, OSError, EOFError) as exc:
        if isinstance(exc, (InvalidParameterError, ShapeError, NonFiniteInputError)):
            raise
        raise InvalidParameterError(
            f"{owner} must be a NumPy .npz archive of arrays q, k (v, mask), without pickled objects. "
            f"Got {str(path)!r}, which cannot be read as one ({exc})."
        ) from None
    return arrays, file_sha


#: arrays this process holds for the designs of ``source = "arrays"``, by ``data.sha256``
_MEMORY: dict[str, QKArrays] = {}
#: files read in this process: (resolved path, the file's SHA-256) -> its arrays
_FILES: dict[tuple[str, str], QKArrays] = {}


def remember_arrays(sha256: str, arrays: QKArrays) -> None:
    """Hold ``arrays`` for the cells of designs whose ``data.sha256`` is ``sha256`` (this process)."""
    _MEMORY[sha256] = arrays


def forget_arrays() -> None:
    """Drop the arrays this process holds (a run does at its end)."""
    _MEMORY.clear()
    _FILES.clear()


def _arrays_for(p: Mapping[str, Any]) -> QKArrays:
    """The arrays of a cell's data parameters: held in memory, else read from ``file`` and verified."""
    sha = p.get("sha256")
    if sha is not None and sha in _MEMORY:
        return _MEMORY[sha]
    file = p.get("file")
    if file is None:
        raise StudyError(
            f"`data.source` = 'arrays' without `data.file` reads the arrays passed as rk.study.run(design, "
            f"data=...); none with SHA-256 {sha!r} are held in this process. Pass them as `data=`."
        )
    arrays, file_sha = load_npz(file)
    if sha is not None and file_sha != sha:
        raise DataChecksumError(
            f"`data.file` {str(file)!r} must have the SHA-256 the design records, `data.sha256` = {sha!r}. "
            f"Got a file with SHA-256 {file_sha!r}: it changed."
        )
    _FILES[(str(Path(file).resolve()), file_sha)] = arrays
    return arrays


def arrays_factory(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    """One cell's ``(Q, K, V)``, each ``(texts, n, d)`` (or ``(n, d)``), float64.

    ``layer``/``head`` select one head of a 5-d ``q`` (default 0); a mask drops the tokens it does
    not keep (from queries, keys and values); without ``v`` the values are standard normal, drawn
    from the cell's data stream ``gen``.
    """
    arrays = _arrays_for(p)
    for key in ("file", "sha256", "causal", "dim"):
        p.pop(key, None)
    layer = int(p.pop("layer", (p.pop("layers", [0]) or [0])[0]))
    head = int(p.pop("head", (p.pop("heads", [0]) or [0])[0]))
    q, k, v, mask = arrays.q, arrays.k, arrays.v, arrays.mask
    if q.ndim == 5:
        for name, value, size in (("layer", layer, q.shape[1]), ("head", head, q.shape[2])):
            if not 0 <= value < size:
                raise InvalidParameterError(
                    f"`data.{name}` must be in [0, {size}) (q has shape {q.shape}: texts, layers, heads, n, d). "
                    f"Got {value} instead."
                )
        q, k = q[:, layer, head], k[:, layer, head]
        v = None if v is None else v[:, layer, head]
        if mask is not None and mask.ndim == 4:
            mask = mask[:, layer, head]
    elif layer or head:
        raise InvalidParameterError(
            f"`data.layer` and `data.head` need q of shape (texts, layers, heads, n, d). Got layer={layer}, "
            f"head={head} for q of shape {q.shape}."
        )
    if v is None:
        v = gen.standard_normal(q.shape)
    if mask is not None and not mask.all():
        n_kept = int(mask.reshape(-1, mask.shape[-1])[0].sum())
        q, k, v = (a[mask].reshape(*a.shape[:-2], n_kept, a.shape[-1]) for a in (q, k, v))
    return tuple(np.array(a, dtype=np.float64) for a in (q, k, v))


def arrays_dim(p: Mapping[str, Any]) -> int:
    """The dimension ``d`` of a cell's queries (for a ``feature_dim`` budget).

    A design built before its in-memory arrays are passed to the run has none yet: it is checked
    with ``data.dim`` (default 1) and checked again, with the arrays' own ``d``, when the run binds
    them (:func:`bind_arrays`).
    """
    if p.get("file") is None and p.get("sha256") not in _MEMORY:
        return int(p.get("dim", 1))
    return int(_arrays_for(p).q.shape[-1])


def bind_arrays(
    design: Design, data: Any, out: str | Path | None, resume: bool
) -> tuple[Design, QKArrays | None]:
    """A run's design bound to its arrays' SHA-256, and the arrays its work units carry (memory only).

    A design of ``source = "arrays"`` takes its arrays from ``data.file`` or from ``data`` (one of
    them); the SHA-256 of the file (or of the arrays) becomes ``data.sha256``, checked against the
    one the design gives and, on resume, against the run in ``out``.

    Raises
    ------
    InvalidParameterError
        ``data`` for a design of another source, both or neither of ``data.file`` and ``data``,
        and the errors of :func:`as_qk_arrays`.
    DataChecksumError
        The arrays' SHA-256 differs from ``data.sha256`` or from that of the run resumed.
    """
    source = design.data.get("source")
    if source != "arrays":
        if data is not None:
            raise InvalidParameterError(
                "`data` (arrays in memory) is for designs with `data.source` = 'arrays'. "
                f"Got data.source = {source!r}."
            )
        return design, None
    file = design.data.get("file")
    if (file is None) == (data is None):
        raise InvalidParameterError(
            "`data.source` = 'arrays' needs exactly one of `data.file` (an .npz file) and rk.study.run(..., "
            f"data=arrays). Got data.file = {file!r} and data = {'None' if data is None else type(data).__name__}."
        )
    if data is not None:
        arrays, what = as_qk_arrays(data), "the arrays passed as `data`"
        sha = arrays.sha256
    else:
        arrays, sha = load_npz(str(file))
        what = f"`data.file` {str(file)!r}"
    dim = design.data.get("dim")
    if dim is not None and dim != arrays.q.shape[-1]:
        raise InvalidParameterError(
            f"`data.dim` must be the last axis of {what}'s q, {arrays.q.shape[-1]}. Got {dim!r} instead."
        )
    pinned = design.data.get("sha256")
    if pinned is not None and pinned != sha:
        raise DataChecksumError(
            f"{what} must have the SHA-256 the design records, `data.sha256` = {pinned!r}. Got {sha!r}."
        )
    if resume and out is not None:
        _check_resumed(Path(out), sha, what)
    d = design.to_dict()
    d["data"] = {**d["data"], "sha256": sha}
    bound = type(design)(**d, source=design.source)
    remember_arrays(sha, arrays)
    return bound, (arrays if data is not None else None)


def _check_resumed(out: Path, sha: str, what: str) -> None:
    try:
        recorded = json.loads((out / "run.json").read_text(encoding="utf-8"))["design"]["data"].get("sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # nothing readable to resume: the run folder's own checks answer
    if recorded is not None and recorded != sha:
        raise DataChecksumError(
            f"cannot resume in {out}: {what} must be the data of the run begun there, SHA-256 {recorded!r}. "
            f"Got SHA-256 {sha!r}: other arrays would mix two data sets in one table. Start a fresh run in "
            "another folder. Nothing was overwritten."
        )
