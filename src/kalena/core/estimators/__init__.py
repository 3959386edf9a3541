"""Reservation estimators: how much of its envelope each workload really needs (SPEC "The reservation").

Three estimators behind one interface (:class:`ReservationEstimator`), vectorised over W workloads
x 8 dimensions: the spec's default :class:`DecayEstimator`, seed 002's :class:`PeakWithMargin` and
the VPA-style :class:`DecayingHistogram`. See README.md in this folder for the formulas.
"""

from kalena.core.estimators.base import (
    EstimatorState,
    ReservationEstimator,
    append_rows,
    assign_rows,
    copy_state,
    select_rows,
)
from kalena.core.estimators.decay import DecayEstimator, DecayParams, DecayState
from kalena.core.estimators.histogram import DecayingHistogram, HistogramParams, HistogramState
from kalena.core.estimators.peak import MarginClass, PeakParams, PeakState, PeakWithMargin, margin_class

__all__ = [
    "DecayEstimator",
    "DecayParams",
    "DecayState",
    "DecayingHistogram",
    "EstimatorState",
    "HistogramParams",
    "HistogramState",
    "MarginClass",
    "PeakParams",
    "PeakState",
    "PeakWithMargin",
    "ReservationEstimator",
    "append_rows",
    "assign_rows",
    "copy_state",
    "margin_class",
    "select_rows",
]
