"""The two manifests of a run folder: ``run.json`` (work units and their parts) and ``manifest.json``.

``run.json`` holds the run's identity (design hash, seed entropy and spawn key, backend), its
design, and for every finished work unit (cell, chunk of trials) the size and SHA-256 of each
part file; it carries a checksum of its own content and is rewritten atomically after each
unit. ``manifest.json`` holds the provenance of the final tables and the size and SHA-256 of
each; it is written last, so it exists only when the tables are whole. The files presented from
those tables afterwards (figures, ``report.md``, LaTeX tables) are added to its ``files`` as they
are written (:func:`record_outputs`), so every file a run writes is listed with its size and
SHA-256 and checked by :func:`rfkit.study.verify_run`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..exceptions import StudyError
from ._atomic import Record, canonical_json, write_atomic

__all__ = [
    "FORMAT",
    "RUN_MANIFEST",
    "RESULT_MANIFEST",
    "PARTS",
    "ManifestDamagedError",
    "read_run_manifest",
    "write_run_manifest",
    "write_result_manifest",
    "ident_of",
    "record_outputs",
    "recorded_files",
    "manifest_damaged_message",
    "part_name",
    "units_done",
]

FORMAT = "rfkit-run/2"
RUN_MANIFEST = "run.json"
RESULT_MANIFEST = "manifest.json"
PARTS = "parts"


class ManifestDamagedError(StudyError):
    """The run manifest (``run.json``) cannot be read or fails its own checksum."""


def _checksum(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def read_run_manifest(path: Path) -> dict[str, Any]:
    """Parse ``run.json`` and check its checksum; raises :class:`ManifestDamagedError`."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestDamagedError(f"it cannot be parsed ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict):
        raise ManifestDamagedError(f"it holds a {type(raw).__name__}, not a JSON object")
    if "format" not in raw:  # written by rfkit before verified parts (per-cell files in cells/)
        return raw
    checksum = raw.pop("checksum", None)
    if checksum != _checksum(raw):
        raise ManifestDamagedError("its content does not match its checksum (the file was altered)")
    if raw.get("format") != FORMAT or not isinstance(raw.get("units"), dict):
        raise ManifestDamagedError(f"unknown format {raw.get('format')!r} (expected {FORMAT!r})")
    return raw


def write_run_manifest(out: Path, body: Mapping[str, Any]) -> None:
    """Write ``out/run.json`` atomically with a checksum of exactly what is read back.

    Rewritten after every work unit, so not flushed to disk each time (see :mod:`._atomic`): after a
    machine crash a damaged ``run.json`` is reported and the run can be started again.
    """
    clean = json.loads(canonical_json({"format": FORMAT, **body}))
    clean["checksum"] = _checksum(clean)
    write_atomic(Path(out) / RUN_MANIFEST, json.dumps(clean, indent=1).encode())


def _read_result_manifest(out: Path) -> dict[str, Any] | None:
    try:
        body = json.loads((Path(out) / RESULT_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return body if isinstance(body, dict) and isinstance(body.get("files"), dict) else None


def recorded_files(out: Path) -> dict[str, Record]:
    """The files listed in ``out/manifest.json`` (empty when there is none or it cannot be read)."""
    body = _read_result_manifest(out)
    return dict(body["files"]) if body is not None else {}


def write_result_manifest(
    out: Path, provenance: Mapping[str, Any], files: Mapping[str, Record], *, keep: Mapping[str, Record] = {}
) -> None:
    """``manifest.json``: the provenance plus the size and SHA-256 of each final table.

    ``keep``: records of earlier outputs (figures, report) to list as well, so that a damaged
    one stays detectable until it is written again.
    """
    text = json.dumps({**provenance, "files": {**dict(keep), **dict(files)}}, indent=2, default=str)
    write_atomic(Path(out) / RESULT_MANIFEST, text.encode("utf-8"), fsync=True)


def record_outputs(out: Path, files: Mapping[str, Record]) -> bool:
    """Add the records of files presented from a finished run (figures, report) to ``manifest.json``.

    Parameters
    ----------
    out : path
        The run folder.
    files : mapping of str to dict
        The files' records (:func:`atomic_text`, :func:`file_record`) by name.

    Returns
    -------
    bool
        True when recorded; False (and nothing recorded) where the folder has no readable
        result manifest.
    """
    body = _read_result_manifest(out)
    if body is None:
        return False
    body["files"] = {**body["files"], **dict(files)}
    text = json.dumps(body, indent=2, default=str)
    write_atomic(Path(out) / RESULT_MANIFEST, text.encode("utf-8"), fsync=True)
    return True


def ident_of(old: Mapping[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    """The identity recorded in an old manifest.

    Runs from before backends were recorded ran on NumPy; for runs from before the source of
    user modules (of rfkit itself) was recorded, ``code`` (``rfkit``) is None (unknown).
    """
    defaults: dict[str, Any] = {"backend": "numpy:default", "code": None, "rfkit": None}
    return {k: old.get(k, defaults.get(k)) for k in like}


def manifest_damaged_message(out: Path, reason: str) -> str:
    """Why a damaged ``run.json`` stops a resumed run, and how to recover."""
    path = out / RUN_MANIFEST
    return (
        f"the run manifest {path} is damaged: {reason}. The sizes and checksums of the part files "
        f"it lists cannot be trusted, so no part is used. To recover, delete {path} and rerun with "
        f"--resume (resume=True): every part is then recomputed from its deterministic trial streams, "
        f"so the tables equal those of an undamaged run. Or start a fresh run in another folder."
    )


def part_name(cell: int, chunk: int, name: str, ext: str) -> str:
    """Path of a part file relative to the run folder."""
    return f"{PARTS}/cell-{cell:06d}.chunk-{chunk:05d}.{name}.{ext}"


def units_done(out: str | Path) -> int:
    """Number of work units recorded in the run manifest of ``out`` (0 if none can be read).

    Parameters
    ----------
    out : path
        The run folder.

    Returns
    -------
    int
        The number of finished work units.
    """
    try:
        units = read_run_manifest(Path(out) / RUN_MANIFEST).get("units", {})
    except (ManifestDamagedError, FileNotFoundError):
        return 0
    return len(units) if isinstance(units, dict) else 0
