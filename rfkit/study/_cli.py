"""Former home of the study commands, kept so that old import paths keep working.

Finding study files by name is :mod:`._builtin`; the ``rfkit list`` and ``rfkit run`` commands
are part of the command line, :mod:`rfkit.cli`.
"""

from ._builtin import builtin_study, builtin_study_dirs

__all__ = ["builtin_study_dirs", "builtin_study"]
