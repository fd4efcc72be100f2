"""Metrics of a run computed from its spans alone, comparison of runs, and their tables."""
from .compare import Comparison, ComparisonRow, compare
from .metrics import (
    GAP_PRIORITY,
    UNATTRIBUTED,
    EpilogueOverlap,
    LoadBalance,
    Metrics,
    Occupancy,
    ScalarSpec,
    TailWave,
    TensorCoreIdle,
    compute_metrics,
    occupancy_curve,
    scalar_specs,
)

__all__ = [
    "GAP_PRIORITY",
    "UNATTRIBUTED",
    "Comparison",
    "ComparisonRow",
    "EpilogueOverlap",
    "LoadBalance",
    "Metrics",
    "Occupancy",
    "ScalarSpec",
    "TailWave",
    "TensorCoreIdle",
    "compare",
    "compute_metrics",
    "occupancy_curve",
    "scalar_specs",
]
