"""rfkit's version (ground floor: imported by the package and by the study provenance)."""

__version__ = "0.1.0"
