"""Checking a run folder: every recorded part and final table against its size and SHA-256."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..exceptions import InvalidParameterError, StudyError
from ._atomic import check_file
from ._lock import describe_holder, lock_holder
from ._manifest import RESULT_MANIFEST, RUN_MANIFEST, ManifestDamagedError, read_run_manifest

__all__ = ["RunReport", "verify_run", "verify_result_folder"]


@dataclasses.dataclass
class RunReport:
    """What :func:`verify_run` found in a run folder.

    Attributes
    ----------
    out : Path
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
        ``report.ok`` is True when no recorded file is missing, truncated or altered.
    """
    out = Path(out)
    if not out.is_dir():
        raise InvalidParameterError(
            f"The `out` parameter must be an existing folder. Got {str(out)!r} instead."
        )
    problems: list[tuple[str, str]] = []
    done, total = 0, None
    mpath = out / RUN_MANIFEST
    if mpath.exists():
        try:
            old = read_run_manifest(mpath)
        except ManifestDamagedError as exc:
            problems.append((str(mpath), f"damaged run manifest: {exc}"))
        else:
            if "format" in old:
                total = int(old["n_cells"]) * int(old["n_chunks"])
                for entry in old["units"].values():
                    done += 1
                    for rel, rec in entry.get("files", {}).items():
                        _, problem = check_file(out / rel, rec)
                        if problem is not None:
                            problems.append((str(out / rel), problem))
    rpath = out / RESULT_MANIFEST
    finished = rpath.exists()
    if finished:
        try:
            prov = json.loads(rpath.read_text(encoding="utf-8"))
            if not isinstance(prov, dict):
                raise ValueError(f"it holds a {type(prov).__name__}, not a JSON object")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append((str(rpath), f"damaged result manifest: cannot be parsed ({exc})"))
        else:
            files = prov.get("files", {})
            if not isinstance(files, dict):
                problems.append((str(rpath), "damaged result manifest: `files` is not a table"))
                files = {}
            for rel, rec in files.items():
                _, problem = check_file(out / rel, rec if isinstance(rec, dict) else {})
                if problem is not None:
                    problems.append((str(out / rel), problem))
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
