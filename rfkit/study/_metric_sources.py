"""Summary metrics: the per-trial column each one averages, and what it measures in words.

The rest of rfkit reads these through :func:`metric_column` and :func:`metric_words`.
"""

from __future__ import annotations

__all__ = ["METRIC_SOURCES", "metric_column", "metric_words"]

#: one metric a line: name | per-trial column | what its mean over trials measures (an indented line
#: goes on with the description above it). Kernel designs
#: compare K_hat with the exact kernel K; attention designs the output A_hat with exact softmax
#: attention A; concentration designs test the chi-squared bound of Blackwelder (2024), Thm 3.3.
_TABLE = """
mse               | sq_err           | mean over pairs of E[(K_hat - K)^2]
rel_mse           | rel_sq_err       | mean over pairs of E[((K_hat - K)/K)^2]
bias              | err              | mean over pairs of E[K_hat - K]
rel_bias          | rel_err          | mean over pairs of E[(K_hat - K)/K]
variance          | sq_dev           | mean over pairs of Var[K_hat] (divisor T-1)
mean_rel_err      | abs_rel_err      | mean over pairs of E|K_hat - K|/K
max_rel_err       | max_rel_err      | E[max over pairs of |K_hat - K|/K]
median_rel_sq_err | med_rel_sq_err   | E[median over pairs of ((K_hat - K)/K)^2] (robust to the few pairs
                                       whose error dominates the mean)
mean_abs_err      | abs_err          | mean over queries and value dims of E|A_hat - A|
max_abs_err       | max_abs_err      | E[max over queries and value dims of |A_hat - A|]
nonpositive_rows  | nonpositive_rows | mean number of rows with a non-positive normaliser
coverage          | covered          | fraction of data sets where max_ij sqrt(MSE)/SM <= the bound
                                       (theorem: >= p)
rms_over_bound    | rms_over_bound   | mean over data sets of max_ij sqrt(MSE)/SM divided by the bound
realized_exceeds  | realized_exceeds | fraction of data sets where one draw's max realised relative error
                                       exceeds the bound
"""


def _parse(table: str) -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    last = ""
    for line in table.strip().splitlines():
        if line.startswith(" "):  # the description of the metric above goes on
            column, words = rows[last]
            rows[last] = (column, f"{words} {line.strip()}")
            continue
        last, column, words = (cell.strip() for cell in line.split("|", 2))
        rows[last] = (column, words)
    return rows


#: summary metric -> (per-trial column, description)
METRIC_SOURCES: dict[str, tuple[str, str]] = _parse(_TABLE)


def metric_column(name: str) -> str:
    """The per-trial column whose mean over trials is the summary metric ``name`` (KeyError if unknown).

    >>> metric_column("rel_mse")
    'rel_sq_err'
    """
    return METRIC_SOURCES[name][0]


def metric_words(name: str) -> str:
    """What the summary metric ``name`` measures, in words (KeyError if unknown)."""
    return METRIC_SOURCES[name][1]
