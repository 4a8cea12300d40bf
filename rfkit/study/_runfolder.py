"""The folder of one study run: verified part files, resumed work units, final tables.

A study run writes into its output folder ``out/``::

    run.json                  run manifest: the run's identity (design hash, seed entropy and
                              spawn key), its design, and for every finished work unit
                              (cell, chunk of trials) the size and SHA-256 of each part file;
                              rewritten atomically (temporary file, fsync, rename) after each unit
    parts/cell-CCCCCC.chunk-KKKKK.NAME.{parquet,npy}
                              part files of one work unit (tables or per-trial arrays); removed
                              once the final tables are written and verified (unless
                              ``keep_parts``), and ``run.json`` then says so (``parts_removed``)
    run.lock                  present while a run holds the folder: pid, host, start time
    .run.lock.guard           empty file whose ``flock`` serialises lock takeover (removed with
                              the lock)
    trials.parquet, pairs.parquet, summary.parquet (+ timings, data_stats)   final tables
    manifest.json             provenance and the size and SHA-256 of each final table; written
                              last, so it exists only when the tables are whole
    summary.csv, theory.csv, report.md, figures/, tables/   derived outputs

Every part is verified (size, then SHA-256) before a resumed run uses it; a missing, truncated
or altered part is reported by path and its trials are recomputed (they are deterministic). The
same checks run when a finished folder is reopened (:meth:`StudyResult.load`,
:func:`verify_run`): a damaged folder is an error, never a silently partial result.

A run touches only files it wrote and recorded (and its own temporary files, named
``.NAME.<pid>-<thread>.rfkit-tmp``): anything else in the folder is left alone, and a fresh run
into a folder holding files it did not write refuses. The run's identity includes the SHA-256
of the source of every module of yours the design names (``module:Class`` maps and estimators,
registered records, ``imports``) and of every module of yours those import, transitively
(:mod:`rfkit.study._code_identity`), so a resume after that code changed refuses instead of
mixing results of two versions.

Atomic writes and checksums: :mod:`rfkit.study._atomic`; the lock: :mod:`rfkit.study._lock`;
the manifests: :mod:`rfkit.study._manifest`; checking a folder: :mod:`rfkit.study._verify`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._version import __version__
from ..exceptions import DamagedResultWarning, RunFolderError, StudyError
from ._atomic import TMP_SUFFIX, check_file, ensure_dir, hook, npy_bytes, parquet_bytes, write_atomic
from ._code_identity import user_code_hashes
from ._lock import GUARD, LOCK, RunLock
from ._manifest import (
    PARTS,
    RESULT_MANIFEST,
    RUN_MANIFEST,
    ManifestDamagedError,
    ident_of,
    manifest_damaged_message,
    part_name,
    read_run_manifest,
    recorded_files,
    write_run_manifest,
)
from ._messages import CellTables, PartLayoutError, PartTables, UnitResult
from ._plain import is_path
from ._records import attention_estimator_record, feature_map_record

__all__ = ["RunFolder", "PartTables", "code_hashes"]

#: files every finish of a run rewrites (final tables and their CSV)
_TABLE_FILES = ("summary.csv", "theory.csv")
#: legacy temporary files of older rfkit versions (fixed names), removed on resume
_LEGACY_TMP = ("run.json.tmp", "manifest.json.tmp")
#: names of rfkit's own part files (parts/) and of the per-cell files of older versions (cells/)
_PART_FILE = re.compile(
    r"(parts/cell-\d{6}\.chunk-\d{5}\.[\w-]+\.(parquet|npy)|parts/cell-.*\.tmp|cells/cell-.*)"
)


def _user_module(obj: Any) -> str | None:
    mod = getattr(obj, "__module__", None)
    return mod if mod and mod.split(".")[0] != "rfkit" else None


@functools.lru_cache(maxsize=1)
def rfkit_code() -> str:
    """rfkit's version and the SHA-256 of its own source (every ``.py`` file of the package, by path).

    Part of a run's identity: a resume with other rfkit code (an upgrade, an edited checkout) is
    another run, since its numbers may differ (even only at round-off) from the finished units'.
    """
    root = Path(__file__).resolve().parents[1]  # the rfkit package
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
    return f"{__version__}:{h.hexdigest()[:16]}"


def code_hashes(design: Any) -> dict[str, str]:
    """SHA-256 of the source file of every module of yours a design names or those import, by module name.

    The modules of ``"module:Class"`` maps and estimators, of registered records the design
    names by name (when they are not rfkit's own), and of ``imports``; then every module of
    yours (outside the standard library, installed packages and rfkit) that those import,
    directly or through one another, found by reading their source
    (:func:`rfkit.study._code_identity.user_code_hashes`). A module without a source file (a
    notebook's ``__main__``) is recorded as ``"no source file"``.
    """
    names: list[str] = list(getattr(design, "imports", []) or [])
    for est in design.estimators:
        for key, look in (("map", feature_map_record), ("estimator", attention_estimator_record)):
            v = est.get(key)
            if v is None:
                continue
            if is_path(v):
                names.append(str(v).partition(":")[0])
                continue
            try:
                mod = _user_module(look(v).factory)
            except Exception:  # noqa: BLE001 - an unknown name was refused when the design was checked
                mod = None
            if mod:
                names.append(mod)
    return user_code_hashes(names)


class RunFolder:
    """The output folder of one run: lock, run manifest, verified part files, final tables.

    Used by :func:`rfkit.study.run` as a context manager: on entry it takes the lock, checks
    the folder (a fresh run refuses a folder holding results; a resumed one refuses another
    design or seed), verifies every recorded part and loads the intact ones into
    :attr:`resumed` (a finished cell's as :class:`CellTables`, a chunk's parts by name); damaged
    parts are listed in :attr:`repaired` (and warned about) and their units recomputed.
    """

    def __init__(
        self,
        out: Path,
        design: Any,
        entropy: int,
        spawn_key: tuple[int, ...],
        n_chunks: int,
        *,
        resume: bool,
        lock_timeout: float | None = 0.0,
        overwrite: bool = False,
    ) -> None:
        self.out = out
        self.overwrite = overwrite
        self.design = design
        self.ident = {
            "design_hash": design.hash(),
            "entropy": str(entropy),
            "spawn_key": [int(k) for k in spawn_key],
        }
        # a run on another backend is another run (same numbers only up to round-off): never mixed
        self.ident["backend"] = (
            f"{getattr(design, 'backend', 'numpy')}:{getattr(design, 'device', None) or 'default'}"
        )
        if getattr(design, "draws", "numpy") != "numpy":  # other numbers: never mixed with NumPy draws
            self.ident["draws"] = design.draws
        # the code of your own modules the design names, and rfkit's own: a resume after either
        # changed is another run
        self.ident["code"] = code_hashes(design)
        self.ident["rfkit"] = rfkit_code()
        self.n_cells = len(design.cells())
        self.n_chunks = n_chunks
        self.resume = resume
        self.lock = RunLock(out, lock_timeout)
        self.units: dict[str, dict[str, Any]] = {}
        self.resumed: dict[tuple[int, int], UnitResult] = {}
        self.repaired: list[dict[str, str]] = []
        self.recorded = 0
        #: a resumed run whose parts were removed and whose final tables verify: they are read back
        self.reuse_tables = False
        #: work units whose parts were removed after the final tables were written (0: none)
        self.parts_removed = 0

    # -------------------------------------------------------------- open
    def __enter__(self) -> RunFolder:
        self.lock.acquire()
        try:
            self._open()
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def _has_results(self, old: dict[str, Any] | None) -> bool:
        out = self.out
        if (out / "trials.parquet").exists() or (out / RESULT_MANIFEST).exists():
            return True
        if old is not None and (old.get("units") or old.get("parts_removed")):
            return True
        legacy = out / "cells"
        if legacy.is_dir() and any(legacy.glob("*.parquet")):
            return True
        return old is None and (out / PARTS).is_dir() and any((out / PARTS).iterdir())

    def _foreign(self) -> list[str]:
        """Entries of the folder that no run wrote (a fresh run refuses to write among them).

        A run's own: the lock, the manifests, ``parts/`` (and ``cells/`` of older versions), and
        every file ``manifest.json`` lists (tables, figures, report).
        """
        ours = {LOCK, GUARD, RUN_MANIFEST, RESULT_MANIFEST, PARTS, "cells"}
        ours |= {rel.split("/", 1)[0] for rel in recorded_files(self.out)}
        return sorted(
            p.name + ("/" if p.is_dir() else "")
            for p in self.out.iterdir()
            if p.name not in ours and not p.name.endswith(TMP_SUFFIX)
        )

    def _open(self) -> None:
        out = self.out
        mpath = out / RUN_MANIFEST
        old: dict[str, Any] | None = None
        damaged: str | None = None
        if mpath.exists():
            try:
                old = read_run_manifest(mpath)
            except ManifestDamagedError as exc:
                damaged = str(exc)
        if self.overwrite:
            self._remove_previous_run()
            old, damaged = None, None
        if not self.resume and (damaged is not None or self._has_results(old)):
            raise RunFolderError(
                f"{out} already holds results of a study run; pass {{resume}} to continue it (or re-verify "
                "a finished one), {overwrite} to replace it, or choose another output directory. Nothing "
                "was overwritten."
            )
        if (not self.resume or (old is None and damaged is None)) and self._foreign():
            found = self._foreign()
            raise RunFolderError(
                f"output folder {str(out)!r} holds files this run did not write ({_names(found)}): a run "
                "writes only into an empty folder or one of its own ({resume}). Choose another output "
                "folder, or move those files. Nothing was written."
            )
        ensure_dir(out / PARTS)
        for d in (out, out / PARTS):  # leftovers of rfkit's own writes interrupted by a crash
            for tmp in d.glob(f".*{TMP_SUFFIX}"):
                with contextlib.suppress(OSError):
                    tmp.unlink()
        for name in _LEGACY_TMP:
            with contextlib.suppress(OSError):
                (out / name).unlink()
        for tmp in (out / PARTS).glob("cell-*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
        if self.resume and damaged is not None:
            raise StudyError(manifest_damaged_message(out, damaged))
        elif not self.resume:
            pass  # a fresh run: nothing of an earlier one is used
        elif old is None or "format" not in old:
            if old is not None and not self._same_run(old):
                self._refuse_other(old)
            n_old = sum(1 for _ in (out / PARTS).glob("cell-*")) + sum(1 for _ in out.glob("cells/*.parquet"))
            if n_old:
                why = (
                    "has no run manifest" if old is None else "was written by an older rfkit (cells/ layout)"
                )
                self.repaired.append({"path": str(out), "problem": f"{why}: {n_old} unverifiable part files"})
                _warn(
                    f"{out} {why}: its {n_old} part files cannot be verified and are recomputed "
                    "(the trials are deterministic, so the tables are unchanged)."
                )
        else:
            if not self._same_run(old):
                self._refuse_other(old)
            self._verify_units(old["units"])
            if old.get("parts_removed"):
                self._check_final_tables(int(old["parts_removed"]))
        if self.resume:
            self._verify_outputs()
        self._save()

    def _check_final_tables(self, parts_removed: int) -> None:
        """A finished run whose parts were removed: its final tables are reused if they verify.

        Otherwise (a table or ``manifest.json`` missing or damaged) every damaged file is reported
        and every work unit recomputed (the trials are deterministic, so the tables are unchanged).
        """
        recorded = recorded_files(self.out)
        tables = [rel for rel in recorded if "/" not in rel and rel.endswith(".parquet")]
        bad = [(str(self.out / t), "missing from manifest.json") for t in ("trials.parquet", "pairs.parquet")]
        bad = [b for b, t in zip(bad, ("trials.parquet", "pairs.parquet")) if t not in recorded]
        if not recorded:
            bad = [(str(self.out / RESULT_MANIFEST), "missing or unreadable")]
        for rel in tables:
            _, problem = check_file(self.out / rel, recorded[rel] if isinstance(recorded[rel], dict) else {})
            if problem is not None:
                bad.append((str(self.out / rel), problem))
        self.reuse_tables = not bad
        self.parts_removed = parts_removed if self.reuse_tables else 0
        if self.reuse_tables:
            with contextlib.suppress(OSError):
                (self.out / PARTS).rmdir()  # nothing is computed: no part is written
        self._report(
            bad,
            "damaged final table(s) {where} of a finished run whose parts were removed; every work unit "
            "is recomputed (the trials are deterministic, so the tables equal an undamaged run's)",
        )

    def _previous_files(self) -> tuple[list[str], list[str]]:
        """The files in the folder (relative paths): those a run wrote, and those it did not.

        A run's own: the lock files, both manifests, every file either manifest lists, and files
        named like rfkit's part and temporary files.
        """
        ours_exact = {LOCK, GUARD, RUN_MANIFEST, RESULT_MANIFEST, *_LEGACY_TMP, *recorded_files(self.out)}
        with contextlib.suppress(ManifestDamagedError, OSError):
            units = read_run_manifest(self.out / RUN_MANIFEST).get("units") or {}
            for entry in units.values() if isinstance(units, dict) else ():
                files = entry.get("files") if isinstance(entry, dict) else None
                ours_exact |= set(files) if isinstance(files, dict) else set()
        ours, foreign = [], []
        for p in sorted(self.out.rglob("*")):
            if p.is_dir() and not p.is_symlink():
                continue
            rel = p.relative_to(self.out).as_posix()
            if rel in ours_exact or p.name.endswith(TMP_SUFFIX) or _PART_FILE.fullmatch(rel):
                ours.append(rel)
            else:
                foreign.append(rel)
        return ours, foreign

    def _remove_previous_run(self) -> None:
        """``overwrite``: remove exactly the files an earlier run wrote; refuse among foreign files."""
        ours, foreign = self._previous_files()
        if foreign:
            raise RunFolderError(
                f"cannot overwrite the run in {str(self.out)!r}: it holds files no run wrote "
                f"({_names(foreign)}), and {{overwrite}} removes only the files of a run. Move those files, "
                "or choose another output folder. Nothing was removed."
            )
        for rel in ours:
            if rel not in (LOCK, GUARD):  # held by this run
                (self.out / rel).unlink(missing_ok=True)
        _remove_empty_dirs(self.out, ours)

    def _verify_outputs(self) -> None:
        """Check the recorded outputs of an earlier finish (figures, report) on resume.

        The final tables and their CSV files are rewritten by every finish, so only the files drawn
        from them (figures, report, LaTeX and report tables) are reported here.
        """
        bad = []
        for rel, rec in recorded_files(self.out).items():
            if rel in _TABLE_FILES or ("/" not in rel and rel.endswith(".parquet")):
                continue
            _, problem = check_file(self.out / rel, rec if isinstance(rec, dict) else {})
            if problem is not None:
                bad.append((str(self.out / rel), problem))
        self._report(
            bad,
            "damaged output file(s) {where}, drawn from the tables: `rfkit run ... --resume` (or "
            "rfkit.report.write_report) draws them again",
        )

    def _report(self, bad: list[tuple[str, str]], what: str) -> None:
        """Record damaged files in :attr:`repaired` and warn, one line per file."""
        if not bad:
            return
        self.repaired += [{"path": p, "problem": why} for p, why in bad]
        lines = "\n".join(f"  {p}: {why}" for p, why in bad)
        _warn(f"{len(bad)} {what.format(where=f'in {self.out}')}:\n{lines}")

    def _theirs(self, old: Mapping[str, Any]) -> dict[str, Any]:
        theirs = ident_of(old, self.ident)
        for key in ("code", "rfkit"):  # written before this was recorded: not checkable
            if theirs.get(key) is None:
                theirs[key] = self.ident[key]
        return theirs

    def _same_run(self, old: Mapping[str, Any]) -> bool:
        return self._theirs(old) == self.ident

    def _refuse_other(self, old: Mapping[str, Any]) -> None:
        theirs = self._theirs(old)
        if {k: v for k, v in theirs.items() if k != "rfkit"} == {
            k: v for k, v in self.ident.items() if k != "rfkit"
        }:
            raise StudyError(
                f"cannot resume in {self.out}: rfkit's own code changed since the run began (rfkit "
                f"{theirs['rfkit']} then, {self.ident['rfkit']} now: version and a hash of its source), so "
                "the finished work units may hold other numbers, if only at round-off; mixing them would "
                "give tables of two code versions. Start a fresh run in another folder, or resume with the "
                "rfkit that began the run. Nothing was overwritten."
            )
        if {k: v for k, v in theirs.items() if k != "code"} == {
            k: v for k, v in self.ident.items() if k != "code"
        }:
            was, now = theirs.get("code") or {}, self.ident["code"]
            changed = sorted(m for m in set(was) | set(now) if was.get(m) != now.get(m))
            raise StudyError(
                f"cannot resume in {self.out}: the source of module(s) {', '.join(map(repr, changed))} "
                "changed since the run began (its SHA-256 differs from the one recorded in run.json), so "
                "the finished work units were computed by other code; mixing them would give tables of "
                "two code versions. Start a fresh run in another folder (or restore the module's code "
                "and resume). Nothing was overwritten."
            )
        raise StudyError(
            f"cannot resume in {self.out}: it holds a run of a different design, seed or backend "
            f"(design hash {theirs.get('design_hash')} vs {self.ident['design_hash']}, entropy "
            f"{theirs.get('entropy')} vs {self.ident['entropy']}, backend {theirs.get('backend')} vs "
            f"{self.ident['backend']}). Nothing was overwritten."
        )

    def _verify_units(self, units: Mapping[str, Any]) -> None:
        problems = []
        for key, entry in units.items():
            try:
                c, k = (int(v) for v in key.split("."))
                files = entry["files"]
                final = bool(entry["final"])
            except (ValueError, KeyError, TypeError):
                continue  # not a unit of this layout: recomputed
            if not (0 <= c < self.n_cells and 0 <= k < self.n_chunks):
                continue
            tables: PartTables = {}
            bad = []
            for rel, rec in files.items():
                data, problem = check_file(self.out / rel, rec)
                if data is not None:
                    try:
                        name = rel.rsplit("/", 1)[-1].split(".", 2)[2].rsplit(".", 1)[0]
                        tables[name] = _decode(rel, data)
                    except Exception as exc:  # noqa: BLE001 - any decoding failure is damage
                        problem = f"unreadable ({type(exc).__name__}: {exc})"
                if problem is not None:
                    bad.append((str(self.out / rel), problem))
            if not bad and final:
                try:
                    read: CellTables | PartTables = CellTables.from_parts(tables)
                except PartLayoutError as exc:
                    bad.append((str(self.out / PARTS / f"cell-{c:06d}.chunk-{k:05d}.*"), str(exc)))
            else:
                read = tables
            if bad:
                problems += bad
                continue
            self.units[key] = {"final": final, "files": dict(files)}
            self.resumed[(c, k)] = UnitResult(c, k, read)
        self._report(
            problems,
            "damaged part file(s) {where}; their work units are recomputed (the trials are "
            "deterministic, so the tables equal an undamaged run's)",
        )

    # -------------------------------------------------------------- write
    def _save(self) -> None:
        write_run_manifest(
            self.out,
            {
                **self.ident,
                "n_cells": self.n_cells,
                "n_chunks": self.n_chunks,
                "trials": self.design.trials,
                "chunk_trials": self.design.chunk_trials,
                "design": self.design.to_dict(),
                "units": self.units,
                **({"parts_removed": self.parts_removed} if self.parts_removed else {}),
            },
        )

    def record(self, result: UnitResult) -> None:
        """Write a finished unit's part files, then record their sizes and SHA-256 in ``run.json``.

        One file per table or array: a finished cell's tables by name (:meth:`CellTables.as_parts`),
        else the chunk's parts; ``final`` in ``run.json`` says which.
        """
        cell, chunk = result.cell, result.chunk
        tables = result.tables.as_parts() if isinstance(result.tables, CellTables) else result.tables
        files = {}
        for name, obj in tables.items():
            if isinstance(obj, pd.DataFrame):
                rel, data = part_name(cell, chunk, name, "parquet"), parquet_bytes(obj)
            else:
                rel, data = part_name(cell, chunk, name, "npy"), npy_bytes(obj)
            files[rel] = write_atomic(self.out / rel, data)
        self.units[f"{cell}.{chunk}"] = {"final": result.final, "files": files}
        self._save()
        self.recorded += 1
        hook(f"after-unit:{self.recorded}")

    def remove_parts(self) -> None:
        """Remove the part files once the final tables are written and verified; ``run.json`` says so.

        The final tables are read back and checked against ``manifest.json`` first; a resume of
        the finished run reuses them (:meth:`_check_final_tables`). Only files the run recorded,
        and files named like its part files, are removed; ``parts/`` goes when it is empty.
        """
        recorded = recorded_files(self.out)
        for rel in ("trials.parquet", "pairs.parquet"):
            rec = recorded.get(rel)
            _, problem = check_file(self.out / rel, rec if isinstance(rec, dict) else {})
            if problem is not None:
                raise StudyError(
                    f"the final table {self.out / rel} does not verify after it was written ({problem}); "
                    "the part files are kept."
                )
        removed = len(self.units)
        for entry in self.units.values():
            for rel in entry["files"]:
                (self.out / rel).unlink(missing_ok=True)
        parts = self.out / PARTS
        for p in parts.glob("*") if parts.is_dir() else ():
            if _PART_FILE.fullmatch(f"{PARTS}/{p.name}"):
                p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            parts.rmdir()  # only when empty: a file of yours there stays
        self.units = {}
        self.parts_removed = removed
        self._save()

    def write_result(self, result: Any) -> None:
        """Write the final tables: ``manifest.json`` goes first (removed) and comes back last.

        Earlier outputs recorded in it (figures, report) stay listed, so a damaged one is still
        detected until the report is written again.
        """
        keep = recorded_files(self.out)
        (self.out / RESULT_MANIFEST).unlink(missing_ok=True)
        result.save(self.out, keep=keep)


def _names(found: list[str]) -> str:
    return ", ".join(found[:8]) + (", ..." if len(found) > 8 else "")


def _remove_empty_dirs(out: Path, removed: list[str]) -> None:
    """Remove the folders that held the ``removed`` files and are now empty (deepest first); never ``out``."""
    dirs = {parent for rel in removed for parent in Path(rel).parents if parent != Path(".")}
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            (out / d).rmdir()  # only when empty: a file of yours there stays


def _decode(rel: str, data: bytes) -> Any:
    if rel.endswith(".parquet"):
        return pd.read_parquet(io.BytesIO(data))
    return np.load(io.BytesIO(data), allow_pickle=False)


def _warn(message: str) -> None:
    warnings.warn(message, DamagedResultWarning, stacklevel=4)
