"""Study files by name: rfkit's built-in studies (shipped inside the package) and ``./studies``.

The built-in study files are package data (``rfkit/studies/*.toml``), so a wheel installed with
pip finds them as a source checkout does. A name is looked up first in ``./studies`` (a user's
own study files, run by name from the folder that holds them), then among the built-in studies.
:func:`find_study` is the one place that turns what a user typed (a name or a path) into a file;
a misspelt name is answered with the closest names (``did you mean 'performer-mse'?``).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from ..exceptions import InvalidParameterError

__all__ = [
    "BUILTIN_STUDY_DIR",
    "StudyNotFoundError",
    "builtin_study_dirs",
    "builtin_studies",
    "builtin_study",
    "find_study",
]

#: The folder of the built-in study files inside the installed package.
BUILTIN_STUDY_DIR = Path(__file__).resolve().parents[1] / "studies"


class StudyNotFoundError(InvalidParameterError, FileNotFoundError):
    """No study file of that name or path; the message names the closest built-in studies.

    An :class:`~rfkit.exceptions.InvalidParameterError` (the command line prints it as a user
    error, exit status 2) and a :class:`FileNotFoundError`, which is what a missing built-in
    study raised before, so existing handlers keep working.
    """


def builtin_study_dirs() -> list[Path]:
    """Return the folders searched for study files by name.

    Returns
    -------
    list of pathlib.Path
        ``./studies`` if it exists, then the built-in ones (each folder once).
    """
    dirs = [Path.cwd() / "studies", BUILTIN_STUDY_DIR]
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and all(not _same(d, o) for o in out):
            out.append(d)
    return out


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def builtin_studies() -> dict[str, Path]:
    """Every study file found by name, ``{name: path}``, in the order of :func:`builtin_study_dirs`.

    A name in ``./studies`` hides the built-in study of the same name.

    Returns
    -------
    dict of str to pathlib.Path
        The study files by name.

    Examples
    --------
    >>> from rfkit.study._builtin import builtin_studies
    >>> "performer-mse" in builtin_studies()
    True
    """
    found: dict[str, Path] = {}
    for d in builtin_study_dirs():
        for f in sorted(d.glob("*.toml")):
            found.setdefault(f.stem, f)
    return found


def _suggestion(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if not close:
        return f"the built-in studies are {', '.join(names)} (`rfkit list` describes them)"
    quoted = " or ".join(repr(c) for c in close)
    return f"did you mean {quoted}? (`rfkit list` shows every study)"


def builtin_study(name: str) -> Path:
    """Path of a built-in study file by name (``"performer-mse"``), searched as ``rfkit list`` does.

    Parameters
    ----------
    name : str
        The study's name: its file name without ``.toml``.

    Returns
    -------
    pathlib.Path
        The study file (``./studies/NAME.toml`` if it exists, else the built-in one).

    Raises
    ------
    StudyNotFoundError
        No study of that name; the message names the closest ones (``did you mean ...?``).

    Examples
    --------
    >>> from rfkit.study import builtin_study
    >>> builtin_study("performer-mse").name
    'performer-mse.toml'
    """
    studies = builtin_studies()
    if name in studies:
        return studies[name]
    raise StudyNotFoundError(
        f"study {name!r}: no built-in study of that name; {_suggestion(name, list(studies))}"
    )


def find_study(study: str | os.PathLike[str]) -> Path:
    """The study file meant by ``study``: an existing file, or the name of a built-in study.

    * an existing file is returned as it is;
    * a bare name (no ``.toml``, no folder) is looked up with :func:`builtin_study`;
    * ``studies/NAME.toml`` (the path of a built-in study in rfkit's source tree), where no
      such file exists, is the built-in study ``NAME``, so the docs' commands work from any folder;
    * any other path that does not exist comes back unchanged, so that reading it reports the
      missing file, unless its name is close to a built-in study's (then the error says
      ``did you mean ...?``).

    Parameters
    ----------
    study : str or path
        A study file or the name of a built-in study.

    Returns
    -------
    pathlib.Path
        The study file.

    Raises
    ------
    StudyNotFoundError
        A name that is no built-in study, or a missing file named like one.

    Examples
    --------
    >>> from rfkit.study._builtin import find_study
    >>> find_study("performer-mse").name
    'performer-mse.toml'
    >>> find_study("studies/cexp-adaptive.toml").stem
    'cexp-adaptive'
    """
    p = Path(study)
    if p.is_file():
        return p
    if p.suffix != ".toml" and len(p.parts) == 1:
        return builtin_study(str(study))
    studies = builtin_studies()
    if p.suffix == ".toml" and p.stem in studies and p.parent == Path("studies"):
        return studies[p.stem]
    close = difflib.get_close_matches(p.stem, list(studies), n=3, cutoff=0.75)
    if p.suffix == ".toml" and close and p.parent == Path("."):
        raise StudyNotFoundError(
            f"cannot read study file {str(p)!r}: no such file; {_suggestion(p.stem, close)}"
        )
    return p
