"""Which attention estimator for these heads, at this cost per query: :func:`advise`.

:func:`advise` (also ``rk.advise``) runs every candidate at the same cost per query on the
caller's heads (a short simulation with its Monte Carlo standard error, and the closed-form
prediction where :mod:`rfkit.theory` has one in its domain), ranks them and says what the
recommendation rests on. The command line is ``rfkit advise QK.npz --budget 64``. Docs page
*Your data and your tools*, section "Which estimator for my heads?".
"""

from ._advise import Advice, advise

__all__ = ["advise", "Advice"]
