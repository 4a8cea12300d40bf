"""Study files by name: the ``studies/`` folders searched for ``NAME.toml``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["builtin_study_dirs", "builtin_study", "find_study"]


def builtin_study_dirs() -> list[Path]:
    """Folders searched for study files: ./studies, then the one shipped next to the package."""
    here = Path(__file__).resolve().parents[2] / "studies"
    dirs = [Path.cwd() / "studies"]
    if here not in dirs:
        dirs.append(here)
    return [d for d in dirs if d.is_dir()]


def builtin_study(name: str) -> Path:
    """Path of a built-in study file by name (``"performer-mse"``), searched as ``rfkit list`` does."""
    for d in builtin_study_dirs():
        cand = d / f"{name}.toml"
        if cand.exists():
            return cand
    raise FileNotFoundError(f"no built-in study named {name!r}; see `rfkit list`")


def find_study(name: str) -> Path:
    """A study file given as a path (``*.toml`` or an existing file) or by the name of a built-in study.

    A name that is neither comes back as a path, so that reading it reports the missing file.
    """
    p = Path(name)
    if p.suffix == ".toml" or p.exists():
        return p
    try:
        return builtin_study(name)
    except FileNotFoundError:
        return p
