"""Checking a run folder: every recorded part and final table against its size and SHA-256."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..exceptions import InvalidParameterError, StudyError
from ._atomic import check_file
from ._design import Design
from ._lock import describe_holder, lock_holder
from ._manifest import RESULT_MANIFEST, RUN_MANIFEST, ManifestDamagedError, read_run_manifest

__all__ = ["RunReport", "verify_run", "verify_result_folder", "result_manifest_problems"]

#: keys of which a result manifest written by rfkit (run or save) has at least one; a JSON object
#: with none of them is another program's file
_RESULT_MARKS = ("design", "design_hash", "files")
#: the tables :meth:`StudyResult.load` reads, which ``files`` must record
_LOADED_TABLES = ("trials.parquet", "pairs.parquet")
#: the fields of a recorded design without which it cannot be rebuilt: those with no default, and
#: the metrics (an empty list is not what was computed)
_DESIGN_KEYS = tuple(
    f.name
    for f in dataclasses.fields(Design)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
) + ("metrics",)


def result_manifest_problems(body: dict[str, Any]) -> list[str]:
    """What a result manifest (``manifest.json``) lacks for its result to be reopened.

    Parameters
    ----------
    body : dict
        The parsed manifest.

    Returns
    -------
    list of str
        One line per missing or malformed entry (the design, its required fields, ``files`` and
        the records of the tables :meth:`StudyResult.load` reads); empty when nothing is missing.
    """
    out = []
    design = body.get("design")
    if "design" not in body:
        out.append("`design` is missing (the study design, needed to reopen the result)")
    elif not isinstance(design, dict):
        out.append(f"`design` must be a JSON object of the design's fields. Got {design!r} instead")
    else:
        out += [
            f"`design.{k}` is missing (a field of the study design)" for k in _DESIGN_KEYS if k not in design
        ]
    files = body.get("files")
    if "files" not in body:
        out.append("`files` is missing (the size and SHA-256 of each table)")
    elif not isinstance(files, dict):
        out.append(f"`files` must be a JSON object of file records. Got {files!r} instead")
    else:
        out += [
            f"`files` has no record of {t} (a table the result is read from)"
            for t in _LOADED_TABLES
            if t not in files
        ]
    return out


def _not_a_run(out: Path, why: list[str]) -> StudyError:
    return StudyError(
        f"The `out` folder {str(out)!r} is not a study run: {'; '.join(why)}. A run folder is written by "
        "rfkit.study.run(..., out=...) (`rfkit run --out`) or StudyResult.save; nothing was checked."
    )


def _keys(body: dict[str, Any]) -> str:
    return ", ".join(map(repr, sorted(body))) or "none"


@dataclasses.dataclass
class RunReport:
    """What :func:`verify_run` found in a run folder.

    Parameters
    ----------
    out : Path
        The run folder.
    problems : list of (str, str)
        ``(path, what is wrong)`` for every damaged file: a missing, truncated or altered part
        or table, or a damaged manifest.
    units_done, units_total : int
        Work units recorded in ``run.json`` and in the whole study (``units_total`` is None
        without a readable run manifest).
    finished : bool
        The final tables were written (``manifest.json`` exists).
    holder : dict or None
        The live process holding the folder's lock (a run in progress), if any.
    """

    out: Path
    problems: list[tuple[str, str]]
    units_done: int
    units_total: int | None
    finished: bool
    holder: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        """No damaged file."""
        return not self.problems

    def __str__(self) -> str:
        state = "finished" if self.finished else "unfinished"
        total = "?" if self.units_total is None else self.units_total
        lines = [f"{self.out}: {state} run, {self.units_done} of {total} work units recorded"]
        if self.holder:
            lines.append(f"in use by {describe_holder(self.holder)}")
        lines += [f"  {p}: {why}" for p, why in self.problems] or ["all recorded files verified"]
        return "\n".join(lines)


def verify_run(out: str | Path) -> RunReport:
    """Verify a run folder: every recorded part and final table against its size and SHA-256.

    Reads ``run.json`` (parts) and ``manifest.json`` (final tables) and checks each file they
    list; changes nothing.

    Parameters
    ----------
    out : path
        A folder written by :func:`rfkit.study.run` (``out=``) or :meth:`StudyResult.save`.

    Returns
    -------
    RunReport
        ``report.ok`` is True when no recorded file is missing, truncated or altered. A result
        manifest that lacks what :meth:`StudyResult.load` needs (the design and its fields,
        ``files`` and the records of the tables) is reported as damaged, with each missing key.

    Raises
    ------
    InvalidParameterError
        ``out`` is not an existing folder.
    StudyError
        ``out`` is not a run folder: it holds neither ``run.json`` nor ``manifest.json``, or each
        one it holds is another program's file (a JSON object with none of rfkit's keys); the
        message names the folder and what is missing.
    """
    out = Path(out)
    if not out.is_dir():
        raise InvalidParameterError(
            f"The `out` parameter must be an existing folder. Got {str(out)!r} instead."
        )
    done, total = 0, None
    mpath, rpath = out / RUN_MANIFEST, out / RESULT_MANIFEST
    if not mpath.exists() and not rpath.exists():
        raise _not_a_run(
            out,
            [
                f"it holds neither {RUN_MANIFEST} (the work units of a run) nor {RESULT_MANIFEST} (the "
                "tables of a finished run or a saved result)"
            ],
        )
    foreign: dict[str, str] = {}  # manifest -> why it is another program's file
    run_problems: list[tuple[str, str]] = []
    if mpath.exists():
        try:
            old = read_run_manifest(mpath)
        except ManifestDamagedError as exc:
            run_problems.append((str(mpath), f"damaged run manifest: {exc}"))
        else:
            if "format" in old:
                try:
                    total = int(old["n_cells"]) * int(old["n_chunks"])
                except (KeyError, TypeError, ValueError):
                    run_problems.append(
                        (
                            str(mpath),
                            "damaged run manifest: `n_cells` or `n_chunks` is missing or not an integer",
                        )
                    )
                removed = old.get("parts_removed", 0)  # units of a finished run whose parts went
                done += removed if isinstance(removed, int) and removed > 0 else 0
                for entry in old["units"].values():
                    done += 1
                    recs = entry.get("files", {}) if isinstance(entry, dict) else {}
                    for rel, rec in recs.items() if isinstance(recs, dict) else ():
                        _, problem = check_file(out / rel, rec if isinstance(rec, dict) else {})
                        if problem is not None:
                            run_problems.append((str(out / rel), problem))
            elif "design_hash" not in old:  # every run.json rfkit wrote, of any version, has it
                foreign[RUN_MANIFEST] = (
                    f"its {RUN_MANIFEST} is not an rfkit run manifest (no `format` or `design_hash`; keys "
                    f"found: {_keys(old)})"
                )
                run_problems.append((str(mpath), f"damaged run manifest: {foreign[RUN_MANIFEST]}"))
    finished = rpath.exists()
    result_problems: list[tuple[str, str]] = []
    if finished:
        try:
            prov = json.loads(rpath.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            result_problems.append((str(rpath), f"damaged result manifest: cannot be parsed ({exc})"))
        else:
            if not isinstance(prov, dict):
                why = f"it holds a JSON {type(prov).__name__}, not an object"
                foreign[RESULT_MANIFEST] = f"its {RESULT_MANIFEST} is not an rfkit result manifest ({why})"
                result_problems.append((str(rpath), f"damaged result manifest: {why}"))
            elif not any(k in prov for k in _RESULT_MARKS):
                why = f"none of `design`, `design_hash`, `files`; keys found: {_keys(prov)}"
                foreign[RESULT_MANIFEST] = f"its {RESULT_MANIFEST} is not an rfkit result manifest ({why})"
                result_problems.append((str(rpath), f"damaged result manifest: {why}"))
            else:
                for why in result_manifest_problems(prov):
                    result_problems.append((str(rpath), f"damaged result manifest: {why}"))
                files = prov.get("files")
                for rel, rec in files.items() if isinstance(files, dict) else ():
                    _, problem = check_file(out / rel, rec if isinstance(rec, dict) else {})
                    if problem is not None:
                        result_problems.append((str(out / rel), problem))
    present = [m for m, there in ((RUN_MANIFEST, mpath.exists()), (RESULT_MANIFEST, finished)) if there]
    if all(m in foreign for m in present):  # each manifest there is another program's file
        missing = [f"it has no {m}" for m in (RUN_MANIFEST, RESULT_MANIFEST) if m not in present]
        raise _not_a_run(out, list(foreign.values()) + missing)
    problems = run_problems + result_problems
    return RunReport(out, problems, done, total, finished, lock_holder(out))


def verify_result_folder(path: str | Path) -> dict[str, Any]:
    """Check a folder before :meth:`StudyResult.load` reads it; return its provenance.

    Raises
    ------
    StudyError
        The folder holds no finished result (an unfinished run says how to finish it), or any
        recorded part or table is missing, truncated or altered (each named by path, with how
        to repair the folder).
    """
    p = Path(path)
    if not p.is_dir():
        raise StudyError(f"{str(p)!r} is not a study result folder: no such directory.")
    if not (p / RUN_MANIFEST).exists() and not (p / RESULT_MANIFEST).exists():
        raise StudyError(f"{p} is not a study result folder: {RESULT_MANIFEST} is missing.")
    report = verify_run(p)
    busy = f"A run is writing it now: {describe_holder(report.holder)}. " if report.holder else ""
    if not report.finished:
        if (p / RUN_MANIFEST).exists():
            raise StudyError(
                f"{p} holds an unfinished study run ({report.units_done} of "
                f"{'?' if report.units_total is None else report.units_total} work units recorded; no "
                f"final tables). {busy}Finish it with `rfkit run STUDY --resume --out {p}` (or "
                "rfkit.study.run(..., out=..., resume=True)), then load it."
            )
        raise StudyError(f"{p} is not a study result folder: {RESULT_MANIFEST} is missing.")
    if report.problems:
        lines = "\n".join(f"  {f}: {why}" for f, why in report.problems)
        raise StudyError(
            f"study result folder {p} is damaged; nothing was loaded:\n{lines}\n{busy}To repair it, rerun "
            f"the study on this folder with --resume (`rfkit run STUDY --resume --out {p}` with the "
            "original --quick/--trials/--seed): damaged parts are recomputed from their deterministic "
            "trial streams and the tables rewritten. A damaged run.json: delete it first (every part "
            "is then recomputed)."
        )
    prov = json.loads((p / RESULT_MANIFEST).read_text(encoding="utf-8"))
    prov.pop("files", None)
    return prov
