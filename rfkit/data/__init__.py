"""Data for studies: synthetic query/key generators (and, later, real transformer q/k).

All generators take a keyword-only ``rng`` and return float64 arrays with points as rows.
"""

from ._synthetic import SyntheticQK, gaussian_qk, hard_qk, pairs_with_norms

__all__ = ["SyntheticQK", "gaussian_qk", "hard_qk", "pairs_with_norms"]
