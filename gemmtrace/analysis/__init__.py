"""Metrics of a run computed from its spans alone, comparison of runs, and their tables."""
from .compare import Comparison, ComparisonRow, compare
from .findings import Explanation, Finding, PairExplanation, explain, explain_pair, find
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
    metrics_metadata,
    occupancy_curve,
    scalar_specs,
)
from .simulate import MODEL_NOTE, Schedule, Simulation, simulate
from .timeline import RoleTimeline, role_timeline

__all__ = [
    "GAP_PRIORITY",
    "MODEL_NOTE",
    "UNATTRIBUTED",
    "Comparison",
    "ComparisonRow",
    "EpilogueOverlap",
    "Explanation",
    "Finding",
    "LoadBalance",
    "Metrics",
    "Occupancy",
    "PairExplanation",
    "RoleTimeline",
    "ScalarSpec",
    "Schedule",
    "Simulation",
    "TailWave",
    "TensorCoreIdle",
    "compare",
    "compute_metrics",
    "explain",
    "explain_pair",
    "find",
    "metrics_metadata",
    "occupancy_curve",
    "role_timeline",
    "scalar_specs",
    "simulate",
]
