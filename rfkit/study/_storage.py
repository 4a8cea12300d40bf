"""Former home of the run-folder code, kept so that old import paths keep working.

The code lives in one module per job: :mod:`._atomic` (atomic writes, checksums),
:mod:`._lock` (one writer per folder), :mod:`._manifest` (``run.json``, ``manifest.json``),
:mod:`._runfolder` (:class:`RunFolder`) and :mod:`._verify` (:func:`verify_run`).
"""

from ._atomic import atomic_parquet, atomic_text, hook, write_atomic
from ._lock import RunLock, lock_holder
from ._manifest import units_done, write_result_manifest
from ._runfolder import RunFolder
from ._verify import RunReport, verify_result_folder, verify_run

__all__ = [
    "RunFolder",
    "RunLock",
    "RunReport",
    "verify_run",
    "verify_result_folder",
    "write_result_manifest",
    "atomic_parquet",
    "atomic_text",
    "write_atomic",
    "units_done",
    "lock_holder",
    "hook",
]
