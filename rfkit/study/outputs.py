"""What the layers above the study computation (the report, the command line) use of a run folder.

A public interface over the run-folder internals: atomic writes with their size and SHA-256
records, the manifest of outputs, the folder lock and the count of finished work units. The
presentation package :mod:`rfkit.report` writes its figures, tables and report through these,
so that every file a run holds is written atomically and listed (docs page "Run folders").
"""

from ._atomic import Record, atomic_csv, atomic_text, ensure_dir, file_record, write_error
from ._lock import RunLock
from ._manifest import record_outputs, units_done

__all__ = [
    "Record",
    "atomic_csv",
    "atomic_text",
    "ensure_dir",
    "file_record",
    "write_error",
    "record_outputs",
    "RunLock",
    "units_done",
]
