"""Findings: what holds a run back, in words, ranked by the time it costs (DESIGN.md section 7).

A finding is a cause (a documented rule over the metrics of section 4 and the tag groups), its size
(time lost, as a fraction of P·D and as the kernel time it amounts to: fraction × D), its place
(SMs, tiles, a time window), the tags that cover the lost time, a remedy, and, where the what-if
replay (simulate.py) or the metrics can say, an estimate of the saving, marked with its source.
Every rule, threshold and estimate is described in docs/findings.md; the thresholds are the
constants below. Trust warnings (dropped records, incomplete regions, profiler overhead, clocks,
timing spread, validation) come first; performance findings follow, largest first. A run whose
every measure stays under its threshold gets no finding, and its explanation says it looks healthy.

Tag groups come from run.tag_groups (the run's own vocabulary), roles from what they record: the
roles with MMA spans are the consumers, the other roles with load-issue spans the producers. Every
rule skips itself when the run lacks what it reads (no timings, no launch metadata, no tiles).
Everything is whole-array numpy over the spans; loops run over rules, SMs or tiles only.
"""
from __future__ import annotations

import dataclasses
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..paths import GemmtraceError
from ..trace import trust_warnings
from . import intervals
from .compare import Comparison, Timing, _number as _metadata_number, compare, read_timing
from .metrics import Metrics, _jsonable, compute_metrics
from .simulate import Simulation, simulate
from .tables import format_ns

TRUST = "trust"
PERFORMANCE = "performance"
GROUPS = ("mma", "wait", "issue", "epilogue", "schedule", "setup", "other")
_G = {g: i for i, g in enumerate(GROUPS)}

# -- thresholds (docs/findings.md) --------------------------------------------------------------
OVERHEAD_MAX = 0.02  # profiled / unprofiled kernel time - 1 above this: the trace is stretched
CLOCK_MIN = 0.95  # an SM clock below this share of its maximum: power- or thermally-limited
SPREAD_MAX = 0.05  # a run-to-run spread (p75 - p25) above this share of the median: noisy timings
VALIDATION_D_TOLERANCE = 0.05  # trace D vs ncu gpu__time_duration (also validate.py; docs/findings.md says why)
VALIDATION_BUSY_POINTS = 6.0  # trace busy vs ncu tensor-pipe busy, percentage points
# ncu's duration less the trace's D up to this: the fixed cost of a launch outside any span (ncu's
# duration of a launch that does almost nothing, 2.2-2.5 us on the H100, and the time before the
# first span and after the last, 0.4-2 us; 4.2-4.3 us measured at 256x256x16384 and 512x1024x8192).
# Beyond it the spans miss more than a launch's edges.
VALIDATION_LAUNCH_EDGES_NS = 5000.0
FEW_TILES_MIN = 0.05  # SMs without a tile hold at least this share of P·D
TAIL_MIN = 0.03  # idle SM time in the tail wave, share of P·D
SCHEDULE_MIN = 0.02  # the other scheduler's replay is this much shorter than the run's own
STARVED_MIN = 0.03  # tensor-core gaps covered by consumer waits, share of P·D
MEMORY_BOUND_SHARE = 0.5  # consumer waits that producers spend waiting for free stages: memory-bound
EPILOGUE_MIN = 0.03  # tensor-core gaps covered by consumer epilogue spans, share of P·D
HEAD_MIN = 0.05  # head of the SMs that ran MMAs, share of P·D
FIXUP_MIN = 0.05  # split tiles' fix-up after each SM's last MMA, share of P·D
_FIXUP_TAGS = ("partial_store", "wait_partial", "reduce")  # stream-K's fix-up (tags.h), in the order it runs
SLOW_TILE = 1.5  # a tile this many times the median tile duration is slow
SLOW_SM = 1.15  # an SM whose median tile takes this many times the median over SMs is slow
UNEVEN_MIN = 0.02  # excess time of slow tiles over the median, share of P·D
NAMED = 5  # SMs or tiles named in a finding's place
_REDUCE_MIN_SPANS = 200_000  # from this many spans on, the replay reads the spans merged per tile (exact)


# -- results ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Where:
    """Where a finding's time is lost: SMs and tiles named (the worst first), a window from T0."""

    text: str
    sms: tuple[int, ...] = ()
    sm_count: int | None = None  # how many SMs the finding covers (the named ones are a few of them)
    tiles: tuple[int, ...] = ()
    tile_count: int | None = None
    window_ns: tuple[int, int] | None = None  # [start, end) in ns from T0

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "sms": list(self.sms), "sm_count": self.sm_count, "tiles": list(self.tiles),
                "tile_count": self.tile_count, "window_ns": list(self.window_ns) if self.window_ns else None}


@dataclass(frozen=True)
class Finding:
    cause: str  # the rule's id (docs/findings.md)
    title: str
    kind: str  # TRUST or PERFORMANCE
    lost_ns: int | None  # the kernel time the lost SM time amounts to: lost_fraction × D (None: trust)
    lost_fraction: float | None  # lost SM time / (P·D)
    what: str
    where: Where
    why: str
    remedy: str
    why_tags: dict[str, str] = field(default_factory=dict)  # tag -> group of the spans covering the time
    estimate: dict[str, Any] | None = None  # what a change would save; "source" is "model" or "metrics"
    figure: str | None = None  # the report figure that shows it: occupancy, timeline, tensor-core, ...
    details: dict[str, Any] = field(default_factory=dict)  # the numbers behind the words

    @property
    def size(self) -> str:
        if self.lost_fraction is None:
            return "trust warning"
        return f"{100 * self.lost_fraction:.1f} % of P·D ≈ {format_ns(self.lost_ns)}"

    def short(self) -> str:
        """One line: title, size, the remedy's first clause (a trust warning's: what it found)."""
        first = _first_clause(self.remedy if self.kind == PERFORMANCE else self.what)
        est = ""
        if self.estimate:  # the estimate without its explanation, its source kept
            text, source = self.estimate["text"], self.estimate.get("source", "model")
            cut = min((i for i in (text.find(" (model"), text.find(" (from the metrics")) if i >= 0), default=len(text))
            est = f" [{text[:cut]} ({source})]"
        return f"{self.title} ({self.size}): {first}{est}"

    def text(self, rank: int | None = None, width: int = 100) -> str:
        """The finding in words, a labelled paragraph per part."""
        lines = [f"{'' if rank is None else f'{rank}. '}{self.title} — {self.size}"]
        parts = [("what", self.what), ("where", self.where.text), ("why", self.why), ("try", self.remedy)]
        if self.estimate:
            parts.append(("saves", self.estimate["text"]))
        for label, body in parts:
            if body:
                lines.append(textwrap.fill(body, width=width, initial_indent=f"   {label:<6} ",
                                           subsequent_indent=" " * 10, break_on_hyphens=False))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable({
            "cause": self.cause, "title": self.title, "kind": self.kind, "lost_ns": self.lost_ns,
            "lost_fraction": self.lost_fraction, "what": self.what, "where": self.where.to_dict(), "why": self.why,
            "why_tags": dict(self.why_tags), "remedy": self.remedy, "estimate": self.estimate,
            "figure": self.figure, "details": self.details, "text": self.text(),
        })


@dataclass(frozen=True)
class Check:
    """One rule as evaluated on a run: its measure and threshold, whether it fired, or why skipped."""

    cause: str
    value: float | None
    threshold: float | None
    fired: bool
    skipped: str | None = None  # what the run lacks, when the rule could not run


@dataclass(frozen=True, eq=False)
class Explanation:
    """A run's findings and a headline saying how the run stands."""

    label: str
    headline: str
    findings: tuple[Finding, ...]
    checks: tuple[Check, ...]

    @property
    def healthy(self) -> bool:
        return not any(f.kind == PERFORMANCE for f in self.findings)

    def top(self, n: int = 3) -> list[Finding]:
        """Trust warnings and the n largest performance findings."""
        trust = [f for f in self.findings if f.kind == TRUST]
        return trust + [f for f in self.findings if f.kind == PERFORMANCE][:n]

    def short(self, n: int = 3) -> str:
        lines = [self.headline] + [f"  {i + 1}. {f.short()}" for i, f in enumerate(self.top(n))]
        more = len(self.findings) - len(self.top(n))
        if more > 0:
            lines.append(f"  ({more} more: gemmtrace explain)")
        return "\n".join(lines)

    def text(self, width: int = 100) -> str:
        parts = [textwrap.fill(self.headline, width=width, break_on_hyphens=False)]
        parts += [f.text(i + 1, width) for i, f in enumerate(self.findings)]
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable({
            "label": self.label, "headline": self.headline, "healthy": self.healthy,
            "findings": [f.to_dict() for f in self.findings],
            "checks": [{"cause": c.cause, "value": c.value, "threshold": c.threshold, "fired": c.fired,
                        "skipped": c.skipped} for c in self.checks],
        })


# -- the run's spans, as the rules need them -----------------------------------------------------
def _categories(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy().astype(np.int64), [str(c) for c in column.cat.categories]
    codes, uniques = pd.factorize(column.astype(str))
    return codes.astype(np.int64), [str(u) for u in uniques]


class _Trace:
    """Numpy columns of the spans, each span's tag group and what its role does (computed once)."""

    def __init__(self, run, m: Metrics):
        spans = self.spans = run.spans
        self.start = spans["start_ns"].to_numpy(np.int64)
        self.end = spans["end_ns"].to_numpy(np.int64)
        self.t0, self.duration = m.t0_ns, m.duration_ns
        self.width = self.duration + 1
        self.sm_ids, self.sm_idx = intervals.dense_index(spans["sm"].to_numpy())
        self.key_max = len(self.sm_ids) * self.width - 1
        self.tag_codes, self.tag_names = _categories(spans["tag"])
        groups = run.tag_groups
        self.tag_group = [groups.get(n, "other") if groups.get(n, "other") in _G else "other" for n in self.tag_names]
        lut = np.array([_G[g] for g in self.tag_group] or [_G["other"]], np.int8)
        self.group = lut[self.tag_codes]
        self.role_codes, self.role_names = _categories(spans["role"])
        n_roles = max(len(self.role_names), 1)
        has_mma = np.bincount(self.role_codes[self.group == _G["mma"]], minlength=n_roles) > 0
        has_issue = np.bincount(self.role_codes[self.group == _G["issue"]], minlength=n_roles) > 0
        self.consumer = has_mma[self.role_codes]  # the roles that issue MMAs
        self.producer = (has_issue & ~has_mma)[self.role_codes]  # the other roles that issue loads
        self.nonempty = self.end > self.start
        self._tile = None

    @property
    def tile(self) -> np.ndarray:
        if self._tile is None:
            self._tile = self.spans["tile"].to_numpy().astype(np.int64)
        return self._tile

    def tile_level_run(self, run):
        """The run with its spans merged per (CTA, role, tag, tile): what the what-if replay reads (each
        tile's first start and last end per tag, its claims and their counter values), at a fraction of
        the rows, so the replay costs little on a trace of millions of spans."""
        spans = self.spans
        if len(spans) < _REDUCE_MIN_SPANS:
            return run
        cta = spans["cta"].to_numpy().astype(np.int64) if "cta" in spans.columns else np.zeros(len(spans), np.int64)
        n_roles, n_tags = max(len(self.role_names), 1), max(len(self.tag_names), 1)
        # (CTA, role, tag) numbered densely, then the tile as the high digit: a dense key range.
        combo_ids, combo = intervals.dense_index((cta * n_roles + self.role_codes) * n_tags + self.tag_codes)
        n_combo = combo_ids.size
        key = (self.tile + 1) * n_combo + combo
        keys, start, end = intervals.group_min_max(key, self.start, self.end)
        _, combo_sm, _ = intervals.group_min_max(combo, spans["sm"].to_numpy().astype(np.int64), self.end)
        kblock = np.full(keys.size, -1, np.int64)
        if "kblock" in spans.columns:  # a claim's kblock holds the tile counter's value: keep the smallest
            claims = np.flatnonzero((self.group == _G["schedule"]) & (spans["kblock"].to_numpy() >= 0))
            kb = spans["kblock"].to_numpy()[claims].astype(np.int64)
            k_keys, k_min, _ = intervals.group_min_max(key[claims], kb, kb)
            kblock[np.searchsorted(keys, k_keys)] = k_min
        tile, c = keys // n_combo - 1, combo_ids[keys % n_combo]
        tag, rest = c % n_tags, c // n_tags
        role, cta_of = rest % n_roles, rest // n_roles
        frame = pd.DataFrame({
            "sm": combo_sm[keys % n_combo], "cta": cta_of, "warp": np.zeros(keys.size, np.int32),
            "region": np.zeros(keys.size, np.int32),
            "role": pd.Categorical.from_codes(role, dtype=spans["role"].dtype),
            "tag": pd.Categorical.from_codes(tag, dtype=spans["tag"].dtype),
            "tile": tile, "kblock": kblock, "start_ns": start, "end_ns": end,
        })
        return type(run)(spans=frame, meta=run.meta)

    def composite_union(self, mask: np.ndarray, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-SM union of the selected spans, in composite coordinates (sm_idx * width + t - t0).
        `start`: the spans' starts where they differ from their own (clipped), else their own."""
        start = self.start if start is None else start
        idx = np.flatnonzero(mask & (self.end > start))
        cs = intervals.composite(self.sm_idx[idx], start[idx] - self.t0, self.width)
        ce = intervals.composite(self.sm_idx[idx], self.end[idx] - self.t0, self.width)
        return intervals.union(cs, ce, self.key_max)

    def tags_of(self, mask: np.ndarray) -> dict[str, str]:
        """tag -> group of the selected spans, the tags holding the most time first."""
        dur = np.bincount(self.tag_codes[mask], weights=self.end[mask] - self.start[mask], minlength=len(self.tag_names))
        order = [i for i in np.argsort(-dur, kind="stable") if dur[i] > 0]
        return {self.tag_names[i]: self.tag_group[i] for i in order}


def _tags_text(tags: dict[str, str]) -> str:
    if not tags:
        return "no tagged span"
    named = ", ".join(f"{t} (group {g})" for t, g in tags.items())
    return f"tag{'s' if len(tags) > 1 else ''} {named}"


def _first_clause(text: str, limit: int = 110) -> str:
    """Text up to its first ':' or ';' outside parentheses; if still long, up to its first ', '."""
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # one short sentence, not spans
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in ":;":
            cut = i
            break
    text = text[:cut]
    if len(text) > limit:
        depth = 0
        for i, ch in enumerate(text):
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and text.startswith(", ", i):
                text = text[:i]
                break
    return text.rstrip(" .")


def _lower(title: str) -> str:
    """A title inside a sentence: first letter lowered unless the word is an acronym (SMs, MMA)."""
    word = title.split(" ", 1)[0]
    return title if word[1:2].isupper() else title[:1].lower() + title[1:]


def _ms(ms: float) -> str:
    return format_ns(ms * 1e6)


# -- small helpers -------------------------------------------------------------------------------
def _pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f} %"


def _number(v) -> float | None:
    """A finite number from run metadata, else None (compare's reader, infinities refused too)."""
    f = _metadata_number(v)
    return f if f is None or math.isfinite(f) else None


def _dict(meta: dict, key: str) -> dict:
    v = meta.get(key) if isinstance(meta, dict) else None
    return v if isinstance(v, dict) else {}


def _sm_list(sms, total: int | None = None) -> str:
    sms = [int(s) for s in sms]
    shown = ", ".join(str(s) for s in sms[:NAMED])
    more = (total if total is not None else len(sms)) - min(len(sms), NAMED)
    return f"SM{'s' if len(sms) > 1 else ''} {shown}" + (f" and {more} more" if more > 0 else "")


def _weighted_window(s: np.ndarray, e: np.ndarray, lo_q: float = 0.1, hi_q: float = 0.9,
                     bins: int = 1000) -> tuple[int, int] | None:
    """The time window holding the middle of the intervals' time (length-weighted midpoints, binned)."""
    w = (e - s).astype(np.float64)
    total = w.sum()
    if total <= 0:
        return None
    span = max(int(e.max()), 1)
    mid_bin = np.minimum(((s + e) // 2 * bins) // span, bins - 1)
    cum = np.cumsum(np.bincount(mid_bin, weights=w, minlength=bins)) / total
    lo = int(np.searchsorted(cum, lo_q)) * span // bins
    hi = (int(np.searchsorted(cum, hi_q)) + 1) * span // bins
    return lo, max(hi, lo)


def _window_text(window: tuple[int, int] | None, duration: int) -> str:
    if window is None:
        return ""
    lo, hi = window
    return f"T0 + {format_ns(lo)} to T0 + {format_ns(hi)} ({_pct(lo / duration, 0)}–{_pct(hi / duration, 0)} of D)"


def _lost(fraction: float, m: Metrics) -> int:
    return int(round(fraction * m.duration_ns))


class _Rules:
    """The rules over one run: each adds a Finding when it fires and a Check either way."""

    def __init__(self, run, m: Metrics):
        self.run, self.m = run, m
        self.meta = run.meta if isinstance(run.meta, dict) else {}
        self.tr = _Trace(run, m)
        self.timing: Timing = read_timing(self.meta)
        self.launch = _dict(self.meta, "launch")
        self.findings: list[Finding] = []
        self.checks: list[Check] = []
        self._sim: Simulation | None = None
        self._sim_done = False
        self.rebalanced = 0.0  # the share of P·D static_imbalance claimed (tail_wave reports the rest)

    # the what-if replay, computed once and only when a rule asks for it
    @property
    def sim(self) -> Simulation | None:
        if not self._sim_done:
            self._sim_done = True
            try:
                self._sim = simulate(self.tr.tile_level_run(self.run), schedulers=("static", "dynamic"), metrics=self.m)
            except GemmtraceError:  # no tiles to replay: the rules that need the replay skip it
                self._sim = None
        return self._sim

    def check(self, cause, value, threshold, fired, skipped=None):
        self.checks.append(Check(cause, None if value is None else float(value),
                                 None if threshold is None else float(threshold), bool(fired), skipped))

    def split_k(self) -> bool:
        """The run passed partial tiles between CTAs (stream-K): it recorded partial-tile stores."""
        names = self.tr.tag_names
        if "partial_store" not in names:
            return False
        return bool((self.tr.tag_codes == names.index("partial_store")).any())

    def skip(self, cause: str, why: str):
        self.check(cause, None, None, False, why)

    def add(self, f: Finding):
        self.findings.append(f)

    # -- trust ----------------------------------------------------------------------------------
    def dropped(self):
        prof = _dict(self.meta, "profiler")
        regions = getattr(self.run, "regions", None)
        dropped = _number(prof.get("dropped"))
        if dropped is None and regions is not None and "dropped" in regions:
            dropped = float(regions["dropped"].sum())
        if dropped is None:
            return self.skip("dropped_records", "the run records no drop count")
        self.check("dropped_records", dropped, 0, dropped > 0)
        if dropped > 0:
            said = trust_warnings(self.m.label, {**prof, "dropped": int(dropped), "incomplete_regions": 0})
            self.add(Finding(
                "dropped_records", "Dropped profiler records", TRUST, None, None,
                what=said[0].split(": ", 1)[-1] + " Busy time, gaps and tile times read low where records are missing.",
                where=Where("the warps whose regions filled (the run's regions table, column dropped)"),
                why="the profiler buffer was sized for fewer spans than the kernel recorded.",
                remedy="re-record with a larger buffer (gemmtrace run ... --buffer-scale 2, or a larger capacity "
                       "for your own capture).",
                details={"dropped": int(dropped)}))

    def incomplete(self):
        prof = _dict(self.meta, "profiler")
        regions = getattr(self.run, "regions", None)
        inc = _number(prof.get("incomplete_regions"))
        if inc is None and regions is not None and "complete" in regions:
            inc = float((~regions["complete"].astype(bool)).sum())
        if inc is None:
            return self.skip("incomplete_regions", "the run records no region completion")
        self.check("incomplete_regions", inc, 0, inc > 0)
        if inc > 0:
            said = trust_warnings(self.m.label, {**prof, "dropped": 0, "incomplete_regions": int(inc)})
            self.add(Finding(
                "incomplete_regions", "Incomplete profiler regions", TRUST, None, None,
                what=said[0].split(": ", 1)[-1],
                where=Where("the regions with complete = False (regions table)"),
                why="a warp exited without finalizing its profiler region, or the launch faulted.",
                remedy="make every recording warp call the profiler's finish on every exit path; re-record.",
                details={"incomplete_regions": int(inc)}))

    def validation(self):
        v = _dict(self.meta, "validation")
        if not v:
            return self.skip("validation_mismatch", "the run was not validated against ncu")
        ok = v.get("ok")
        self.check("validation_mismatch", None if ok is None else float(not ok), 0, ok is False)
        if ok is False:
            d, b = _number(v.get("duration_diff")), _number(v.get("busy_diff_points"))
            tol = _dict(v, "tolerance")
            trace_ns, ncu_ns = _number(v.get("trace_duration_ns")), _number(v.get("ncu_duration_ns"))
            tol_d, tol_b = _number(tol.get("duration")), _number(tol.get("busy_points"))
            # A short launch: D misses only the launch's edges, which are most of the difference there.
            edges = (trace_ns is not None and ncu_ns is not None and d is not None and tol_d is not None
                     and d < -tol_d and 0 < ncu_ns - trace_ns <= VALIDATION_LAUNCH_EDGES_NS)
            why = "the profiler's spans do not cover what the hardware counters saw (docs/findings.md, validation)."
            remedy = "re-run gemmtrace validate; if it persists, check the kernel's MMA spans (issue to wait) and the profiler overhead."
            if edges:
                why = (f"the launch is short: ncu's duration is {(ncu_ns - trace_ns) / 1e3:.1f} µs longer than D, no more "
                       f"than a launch's fixed cost outside any span (what ncu gives a launch that does almost nothing, "
                       f"2.2-2.5 µs on the H100, and the time before the first span and after the last), which is "
                       f"{_pct(-d, 0)} of this launch")
                if b is not None and tol_b is not None and b > tol_b:
                    why += ("; an MMA span runs from its first wgmma's issue to the wait that retires it, and on a "
                            "k-loop that waits on its loads the tensor pipe is active for a fraction of that")
                why += " (docs/findings.md, validation)."
                remedy = ("read D and busy as the trace's own on a launch this short; validate a longer shape of the same "
                          "kernel to check the profiler's clock mapping.")
            self.add(Finding(
                "validation_mismatch", "Trace disagrees with Nsight Compute", TRUST, None, None,
                what=f"the trace's D is {_pct(d, 2)} off ncu's gpu__time_duration (tolerance "
                     f"±{_pct(tol_d, 1)}) and its tensor-core busy "
                     f"{'—' if b is None else f'{b:+.1f}'} points off ncu's tensor-pipe busy (tolerance "
                     f"±{tol_b} points).",
                where=Where("the whole launch"),
                why=why,
                remedy=remedy,
                details={**{k: v.get(k) for k in ("duration_diff", "busy_diff_points")}, "launch_edges": edges}))

    def overhead(self):
        t = _dict(self.meta, "timings")
        ov = _number(t.get("profiler_overhead"))
        if ov is None:
            plain, prof = _number(t.get("kernel_ms")), _number(t.get("profiled_ms"))
            ov = prof / plain - 1 if plain and prof else None
        if ov is None:
            return self.skip("profiler_overhead", "the run records no profiled and unprofiled timing")
        self.check("profiler_overhead", ov, OVERHEAD_MAX, ov > OVERHEAD_MAX)
        if ov > OVERHEAD_MAX:
            plain, prof = _number(t.get("kernel_ms")), _number(t.get("profiled_ms"))
            times = f" ({_ms(prof)} vs {_ms(plain)})" if plain and prof else ""
            self.add(Finding(
                "profiler_overhead", f"Profiler overhead above {_pct(OVERHEAD_MAX, 0)}", TRUST, None, None,
                what=f"the profiled build ran {_pct(ov)} slower than the unprofiled one{times}, above the "
                     f"{_pct(OVERHEAD_MAX, 0)} this project allows: the trace's µs read about that much long; "
                     "its shares of P·D are less affected.",
                where=Where("the whole launch"),
                why="recording a span costs a few cycles on the warp that records it; many short spans add up.",
                remedy="record fewer spans on the hot path (per k-block spans on one warp of a warpgroup), or "
                       "read the trace's shares rather than its absolute times.",
                details={"profiler_overhead": ov}))

    def clock(self):
        dev, v = _dict(self.meta, "device"), _dict(self.meta, "validation")
        max_mhz = _number(dev.get("sm_clock_max_mhz"))
        hz = _number(v.get("sm_clock_hz"))
        mhz, source = (hz / 1e6, "ncu's sm__cycles_elapsed.avg.per_second during the launch") if hz else (
            _number(dev.get("sm_clock_mhz")), "nvidia-smi after timing")
        if not max_mhz or not mhz:
            return self.skip("sm_clock", "the run records no SM clock and its maximum")
        share = mhz / max_mhz
        self.check("sm_clock", share, CLOCK_MIN, share < CLOCK_MIN)
        if share < CLOCK_MIN:
            self.add(Finding(
                "sm_clock", "SM clock below its maximum", TRUST, None, None,
                what=f"the SMs ran at {mhz:.0f} MHz, {_pct(share, 0)} of their {max_mhz:.0f} MHz maximum "
                     f"({source}): the GPU was power- or thermally-limited, so times and TFLOP/s depend on the "
                     "clock as much as on the kernel.",
                where=Where("the whole device"),
                why="long tensor-core kernels draw the board to its power limit and the clock drops.",
                remedy="compare kernels only with timings taken side by side in one process (as gemmtrace run "
                       "does with cuBLAS); do not compare across sessions or machines.",
                details={"sm_clock_mhz": mhz, "sm_clock_max_mhz": max_mhz}))

    def spread(self):
        t = self.timing
        if t.kernel_ms is None or t.spread_ms is None:
            return self.skip("timing_spread", "the run records no kernel-time spread")
        rel = t.spread_ms / t.kernel_ms
        self.check("timing_spread", rel, SPREAD_MAX, rel > SPREAD_MAX)
        if rel > SPREAD_MAX:
            self.add(Finding(
                "timing_spread", "Noisy timings", TRUST, None, None,
                what=f"the kernel time's run-to-run spread ({t.spread_kind}) is {_ms(t.spread_ms)}, "
                     f"{_pct(rel)} of its {_ms(t.kernel_ms)} median: differences smaller than that are noise.",
                where=Where("the timed launches"),
                why="other work on the GPU, clock changes, or too few timed rounds.",
                remedy="re-time with more rounds (--iters) on an idle GPU.",
                details={"spread_ms": t.spread_ms, "kernel_ms": t.kernel_ms}))

    def no_mma(self):
        has = bool((self.tr.group == _G["mma"]).any())
        self.check("no_mma_spans", float(not has), 0, not has)
        if not has:
            self.add(Finding(
                "no_mma_spans", "No MMA spans", TRUST, None, None,
                what="no span belongs to the tag group mma, so tensor-core busy time is zero and every SM's whole "
                     "D counts as head.",
                where=Where("every SM"),
                why=f"the run's tags are {', '.join(f'{n} ({g})' for n, g in zip(self.tr.tag_names, self.tr.tag_group))}.",
                remedy="tag the spans from MMA issue to its wait with a tag of group mma.",
            ))

    # -- performance ----------------------------------------------------------------------------
    def too_few_tiles(self):
        m, P = self.m, self.m.sm_count
        tiles = m.tail_wave.tiles
        if tiles == 0:
            return self.skip("too_few_tiles", "no span is tagged with a tile")
        idle_sms = P - m.load_balance.sms_with_tiles
        frac = idle_sms / P
        if tiles >= P:
            self.check("too_few_tiles", 0.0, FEW_TILES_MIN, False)
            return self._idle_sms(idle_sms, frac)
        self.skip("idle_sms", "fewer tiles than SMs (too_few_tiles)")
        fired = frac >= FEW_TILES_MIN
        self.check("too_few_tiles", frac, FEW_TILES_MIN, fired)
        if not fired:
            return
        split = max(2, P // tiles)
        # What split-K by `split` would save: each tile's mainloop (first to last MMA) shrinks by the split.
        # A run that splits already (stream-K) has no unsplit mainloop to divide: no estimate.
        tr = self.tr
        already = self.split_k()
        mma_tile = np.where((tr.group == _G["mma"]) & (tr.tile >= 0), tr.tile, -1)
        _, mma_s, mma_e = intervals.group_min_max(mma_tile, tr.start, tr.end)
        estimate = None
        if mma_s.size and not already:
            mainloop = int(np.median(mma_e - mma_s))
            saving = int(mainloop * (1 - 1 / split))
            new_d = m.duration_ns - saving
            estimate = {
                "source": "model", "change": f"split-K by {split}", "saving_ns": saving,
                "duration_ns": [m.duration_ns, new_d], "kernel_change": -saving / m.duration_ns,
                "text": f"split-K by {split}: D {format_ns(m.duration_ns)} → ~{format_ns(new_d)}, kernel "
                        f"{-100 * saving / m.duration_ns:+.0f} % (model: the median tile's {format_ns(mainloop)} "
                        f"mainloop divided by {split}; the reduction of the partial tiles is not counted)",
            }
        smaller = _tile_options(self.meta, P)
        per_sm = m.load_balance.per_sm
        working = per_sm.loc[per_sm["tiles"] > 0, "sm"].tolist()
        if already:
            split_text = (f" Their k-loops are split already (stream-K: partial tiles pass between CTAs), over "
                          f"{len(working)} SMs.")
            remedy = ("use smaller tiles" + (f" ({smaller})" if smaller else "") + ": more tiles to split, and a "
                      "smaller partial per segment (a partial is the tile's area in fp32), so a cheaper fix-up; or "
                      "cut each tile into more segments, where the memory system can feed them.")
        else:
            split_text = ""
            remedy = (f"split the K dimension: split-K or stream-K by {split} gives {split * tiles} work units for "
                      f"{P} SMs; or use smaller tiles" + (f" ({smaller})" if smaller else "") + ".")
        self.add(Finding(
            "too_few_tiles", "Too few tiles for the SMs", PERFORMANCE, _lost(frac, m), frac,
            what=f"{tiles} tiles for {P} SMs (waves = {m.tail_wave.waves:.3f}): {idle_sms} SMs never get a tile and "
                 f"sit idle for the whole {format_ns(m.duration_ns)}; mean occupancy is {_pct(m.occupancy.mean)} and "
                 f"the tensor cores are busy {_pct(m.tensor_core.busy_fraction)} of P·D." + split_text,
            where=Where(f"{idle_sms} of {P} SMs idle throughout; the work runs on {_sm_list(working, len(working))}.",
                        sm_count=idle_sms, tile_count=tiles, window_ns=(0, m.duration_ns)),
            why="no span covers the lost time: those SMs have no CTA (idle).",
            remedy=remedy,
            estimate=estimate, figure="occupancy",
            details={"tiles": tiles, "idle_sms": idle_sms, "split": split}))

    def _idle_sms(self, idle_sms: int, frac: float):
        """Enough tiles, yet SMs that never ran one: the grid is smaller than the device."""
        m, P = self.m, self.m.sm_count
        self.check("idle_sms", frac, FEW_TILES_MIN, frac >= FEW_TILES_MIN)
        if frac < FEW_TILES_MIN:
            return
        grid = _number(self.launch.get("grid_ctas"))
        cluster = int(_number(self.launch.get("cluster")) or 1)
        estimate = None
        sim = self.sim
        if sim is not None and sim.persistent:
            # The what-if replay on a grid of one CTA per SM (whole clusters), under the run's own rule.
            own = "static" if sim.recorded_scheduler == "static" else "dynamic"
            full = (P // cluster) * cluster
            try:
                wider = simulate(self.run, schedulers=(own,), workers=full, metrics=m)
            except GemmtraceError:
                wider = None
            if wider is not None:
                change = wider.schedules[0].makespan_ns / wider.replay.makespan_ns - 1
                estimate = {"source": "model", "change": f"a grid of {full} CTAs", "kernel_change": change,
                            "saving_ns": int(-change * m.duration_ns),
                            "text": f"{full} CTAs instead of {sim.recorded_workers}: kernel {100 * change:+.1f} % "
                                    f"(model: the measured tile times replayed {own} on {full} CTAs; a tile runs "
                                    "10-15 % slower when every SM is busy, which the model does not see)"}
        ran = m.load_balance.per_sm
        idle_ids = sorted(set(range(P)) - set(ran.loc[ran["tiles"] > 0, "sm"].tolist()))
        self.add(Finding(
            "idle_sms", "SMs left without work", PERFORMANCE, _lost(frac, m), frac,
            what=f"{idle_sms} of {P} SMs never ran a tile although there are {m.tail_wave.tiles} tiles"
                 + (f": the grid has {int(grid)} CTAs for {P} SMs" if grid else "") + ".",
            where=Where(f"{_sm_list(idle_ids)} (SM ids as the device numbers them), for the whole "
                        f"{format_ns(m.duration_ns)}.", sms=tuple(idle_ids[:NAMED]), sm_count=idle_sms,
                        window_ns=(0, m.duration_ns)),
            why="no span covers the lost time: those SMs have no CTA.",
            remedy="launch one CTA per SM (a persistent grid of the device's SM count, in whole clusters).",
            estimate=estimate, figure="occupancy", details={"idle_sms": idle_sms, "grid_ctas": grid}))

    def tail_wave(self):
        m, P = self.m, self.m.sm_count
        tw = m.tail_wave
        if tw.tiles == 0 or tw.length_ns is None:
            return self.skip("tail_wave", "no span is tagged with a tile")
        if tw.tiles < P:
            return self.check("tail_wave", 0.0, TAIL_MIN, False)  # too_few_tiles says it better
        # The SMs that never ran a tile are idle_sms' to report, and what the dynamic replay recovers is
        # static_imbalance's: the tail wave keeps the rest, wave quantization proper.
        working = m.load_balance.sms_with_tiles / P
        tail_idle = max((tw.fraction or 0.0) * (working - (tw.occupancy if tw.occupancy is not None else working)), 0.0)
        idle = max(tail_idle - self.rebalanced, 0.0)
        self.check("tail_wave", idle, TAIL_MIN, idle >= TAIL_MIN)
        if idle < TAIL_MIN:
            return
        per_sm = m.load_balance.per_sm
        ran = per_sm[per_sm["tiles"] > 0]
        full = math.ceil(tw.waves)
        last_wave = tw.tiles - (full - 1) * P
        fewer = ran[ran["tiles"] < ran["tiles"].max()]
        first_done = ran.sort_values("finish_ns", kind="stable")
        early = first_done["sm"].head(NAMED).tolist()
        options = _tile_options(self.meta, P)
        estimate = self._even_work_estimate()
        sched = self.sim.recorded_scheduler if self.sim is not None else self.meta.get("scheduler")
        dyn = self._dynamic_text() if sched == "static" else ""
        what = (f"the last {format_ns(tw.length_ns)} ({_pct(tw.fraction)} of D) ran after the first SM ran out of "
                f"tiles, at {_pct(tw.occupancy)} mean occupancy: {tw.tiles} tiles = {tw.waves:.2f} waves on {P} SMs, "
                f"so the last wave has {last_wave} tiles for {P} SMs (wave-quantization bound "
                f"{_pct(tw.wave_quantization_bound)})")
        if len(fewer):
            few, most = int(fewer["tiles"].min()), int(ran["tiles"].max())
            what += f"; {len(fewer)} SMs ran {few} tile{'s' if few != 1 else ''} where the others ran {most}"
        if self.rebalanced > 0:
            what += (f". Of the tail's idle SM time ({_pct(tail_idle)} of P·D), the dynamic replay recovers "
                     f"{_pct(min(self.rebalanced, tail_idle))} (static schedule imbalance); this finding is the rest")
        self.add(Finding(
            "tail_wave", "Tail wave", PERFORMANCE, _lost(idle, m), idle,
            what=what + ".",
            where=Where(f"{_window_text((tw.t_first_idle_ns - m.t0_ns, m.duration_ns), m.duration_ns)}; the first "
                        f"to finish: {_sm_list(early, len(ran))}.",
                        sms=tuple(int(s) for s in early), sm_count=len(fewer) or None, tile_count=tw.tiles,
                        window_ns=(tw.t_first_idle_ns - m.t0_ns, m.duration_ns)),
            why="no span covers the lost time: SMs without a tile left wait for the last ones to finish.",
            remedy="make the tile count fill whole waves: stream-K (split the last wave's work over all SMs) "
                   + (f"or another tile shape ({options})" if options else "or another tile shape")
                   + (f"; {dyn}" if dyn else "") + ".",
            estimate=estimate, figure="occupancy",
            details={"tail_ns": tw.length_ns, "tail_occupancy": tw.occupancy, "waves": tw.waves,
                     "last_wave_tiles": last_wave}))

    def _even_work_estimate(self) -> dict | None:
        """Stream-K's ideal, from the replay's measured paces: every worker does the same work."""
        sim = self.sim
        if sim is None:
            return None
        units, ready = sim.service.units, np.asarray(sim.service.ready_ns, np.int64)
        pace = (units["pace_ns"] - units["claim_ns"]).to_numpy(np.int64)
        worker = units["worker"].to_numpy()
        per_worker = np.bincount(worker, weights=pace, minlength=ready.size)
        busiest_end = float((ready + per_worker).max())
        drain = max(sim.measured_makespan_ns - busiest_end, 0.0)  # the last unit's work past its pace, trailer
        even = float(ready.mean()) + pace.sum() / ready.size + drain
        d = sim.measured_makespan_ns
        if even >= d:
            return None
        return {"source": "model", "change": "work spread evenly over the workers (stream-K's ideal)",
                "saving_ns": int(d - even), "duration_ns": [d, int(even)], "kernel_change": even / d - 1,
                "text": f"stream-K at best: D {format_ns(d)} → ~{format_ns(even)}, kernel {100 * (even / d - 1):+.1f} % "
                        f"(model: the measured tile paces spread evenly over {ready.size} "
                        f"{'clusters' if sim.cluster > 1 else ('CTAs' if sim.persistent else 'SMs')})"}

    def _dynamic_text(self) -> str:
        sim = self.sim
        if sim is None or not sim.persistent:
            return ""
        dyn = sim.schedule("dynamic")
        change = dyn.makespan_ns / sim.replay.makespan_ns - 1
        return (f"the dynamic scheduler would give {format_ns(dyn.tail_ns or 0)} of tail and a kernel "
                f"{100 * change:+.1f} % (model)")

    def scheduler(self):
        m, tr = self.m, self.tr
        # No schedule can save more than the SMs' finish spread plus the claim time an SM spends: below
        # the threshold, the replay is not worth its cost.
        claims = (tr.group == _G["schedule"]) & tr.nonempty
        claim_max = np.bincount(tr.sm_idx[claims], weights=tr.end[claims] - tr.start[claims]).max() if claims.any() else 0
        bound = ((m.load_balance.finish_spread_ns or 0) + claim_max) / m.duration_ns
        if m.tail_wave.tiles == 0 or bound < SCHEDULE_MIN:
            why = "no tiles" if m.tail_wave.tiles == 0 else "finish spread and claims too small for any schedule to save 2 %"
            self.skip("static_imbalance", why)
            self.skip("scheduler_overhead", why)
            return
        sim = self.sim
        if sim is None or not sim.persistent:
            self.skip("static_imbalance", "not a persistent kernel with a tile schedule")
            self.skip("scheduler_overhead", "not a persistent kernel with a tile schedule")
            return
        if self.split_k():
            # Stream-K (v9, v10): the units are parts of tiles joined by a fix-up, which the replay of
            # whole tiles does not model, so "claim whole tiles dynamically" would be the wrong remedy.
            why = "split-K run: its units are parts of tiles joined by a fix-up (partial_store, wait_partial, reduce)"
            self.skip("static_imbalance", why)
            self.skip("scheduler_overhead", why)
            return
        m = self.m
        own, other = ("static", "dynamic") if sim.recorded_scheduler == "static" else ("dynamic", "static")
        alt = sim.schedule(other)
        change = alt.makespan_ns / sim.replay.makespan_ns - 1  # against the run's own replay: model error cancels
        saving = -change
        cause = "static_imbalance" if own == "static" else "scheduler_overhead"
        self.skip("scheduler_overhead" if own == "static" else "static_imbalance", f"the run is {own}-scheduled")
        self.check(cause, saving, SCHEDULE_MIN, saving >= SCHEDULE_MIN)
        if saving < SCHEDULE_MIN:
            return
        lost = int(round(saving * m.duration_ns))
        if own == "static":
            self.rebalanced = saving
        kernel = f"kernel {100 * change:+.1f} %"
        if sim.measured_kernel_ms:
            kernel = (f"kernel {_ms(sim.measured_kernel_ms)} → ~{_ms(sim.measured_kernel_ms * (1 + change))} "
                      f"({100 * change:+.1f} %)")
        tail_before = m.tail_wave.length_ns or 0
        estimate = {"source": "model", "change": f"{other} scheduling", "saving_ns": lost, "kernel_change": change,
                    "tail_ns": [tail_before, alt.tail_ns], "makespan_ns": [sim.replay.makespan_ns, alt.makespan_ns],
                    "text": f"{other} scheduling: tail {format_ns(tail_before)} → ~{format_ns(alt.tail_ns or 0)}, "
                            f"{kernel} (model)"}
        per_sm = m.load_balance.per_sm
        ran = per_sm[per_sm["tiles"] > 0].sort_values("finish_ns", ascending=False, kind="stable")
        late = ran["sm"].head(NAMED).tolist()
        finish = (int(ran["finish_ns"].iloc[-1]) - m.t0_ns, m.duration_ns) if len(ran) else None
        fewest = int(ran["tiles"].min()) if len(ran) else 0
        if own == "static":
            self.add(Finding(
                cause, "Static schedule imbalance", PERFORMANCE, lost, saving,
                what=f"the static schedule hands each cluster a fixed list of tiles, and the lists take unequal "
                     f"time: SMs finish {format_ns(m.load_balance.finish_spread_ns or 0)} apart "
                     f"(tiles per SM {fewest}–{m.load_balance.tiles_max}). Replaying the "
                     f"measured tile times with the dynamic scheduler finishes {_pct(saving)} sooner.",
                where=Where(f"the last to finish: {_sm_list(late, len(ran))}; finishes spread over "
                            f"{_window_text(finish, m.duration_ns)}.", sms=tuple(int(s) for s in late),
                            sm_count=len(ran), window_ns=finish),
                why="no span covers the lost time: the SMs that finish early have no tile left.",
                remedy="use dynamic scheduling (gemmtrace run ... --sched dynamic on a kernel that has it), "
                       "which hands the next tile to the cluster that frees first.",
                estimate=estimate, figure="finish-times",
                details={"finish_spread_ns": m.load_balance.finish_spread_ns, "model_change": change}))
        else:
            claims = int(sim.service.units["claim_ns"].sum())
            per_claim = claims / max(len(sim.service.units), 1)
            tr = self.tr
            tags = tr.tags_of((tr.group == _G["schedule"]) & tr.nonempty)
            self.add(Finding(
                cause, "Dynamic scheduling costs more than it balances", PERFORMANCE, lost, saving,
                what=f"tile claims held the clusters up {format_ns(claims)} in all ({format_ns(per_claim)} "
                     f"a claim); replaying the same tile times under the static schedule finishes {_pct(saving)} "
                     "sooner, so the balance the claims buy is worth less than they cost.",
                where=Where(f"every cluster, at each tile boundary; the last to finish: {_sm_list(late, len(ran))}.",
                            sms=tuple(int(s) for s in late), sm_count=len(ran)),
                why=f"the {_tags_text(tags)} cover{'s' if len(tags) == 1 else ''} the claim time.",
                remedy="claim the next tile early (during the current tile's mainloop) so the claim's latency "
                       "hides, or use the static schedule for this shape.",
                why_tags=tags, estimate=estimate, figure="timeline",
                details={"claim_ns": claims, "model_change": change}))

    def starved(self):
        m, tr = self.m, self.tr
        wait_gap = m.tensor_core.gap_attribution_ns.get("wait", 0)
        frac = wait_gap / m.tensor_core.capacity_ns
        if frac < STARVED_MIN:
            self.check("memory_starved", frac, STARVED_MIN, False)
            self.check("producer_starved", frac, STARVED_MIN, False)
            return
        # The consumers' waits, and how much of them the producers spent waiting for a free stage too.
        cw_s, cw_e = tr.composite_union(tr.consumer & (tr.group == _G["wait"]))
        pw_s, pw_e = tr.composite_union(tr.producer & (tr.group == _G["wait"]))
        total = int((cw_e - cw_s).sum())
        both = int(intervals.covered_length(pw_s, pw_e, cw_s, cw_e).sum()) if total else 0
        share = both / total if total else 0.0
        memory = share >= MEMORY_BOUND_SHARE
        cause = "memory_starved" if memory else "producer_starved"
        self.skip("producer_starved" if memory else "memory_starved", "the other kind of consumer wait")
        self.check(cause, frac, STARVED_MIN, total > 0)
        if total == 0:
            return
        sm_of = cw_s // tr.width
        per_sm = np.bincount(sm_of, weights=cw_e - cw_s, minlength=len(tr.sm_ids))
        worst = np.argsort(-per_sm, kind="stable")[:NAMED]
        window = _weighted_window(cw_s % tr.width, cw_e % tr.width)
        tags = tr.tags_of(tr.consumer & (tr.group == _G["wait"]) & tr.nonempty)
        ptags = tr.tags_of(tr.producer & (tr.group == _G["wait"]) & tr.nonempty)
        stages = self.launch.get("stages")
        where = Where(f"worst {_sm_list(tr.sm_ids[worst])} ({format_ns(per_sm[worst[0]])} on the worst, "
                      f"{format_ns(per_sm.mean())} per SM on average); mostly {_window_text(window, m.duration_ns)}.",
                      sms=tuple(int(s) for s in tr.sm_ids[worst]), sm_count=int((per_sm > 0).sum()), window_ns=window)
        what = (f"the consumers waited for data while their tensor cores sat idle: {_pct(frac)} of P·D of gaps "
                f"between MMAs. During {_pct(share, 0)} of that wait the producers were themselves waiting for a "
                "free stage")
        if memory:
            self.add(Finding(
                cause, "Consumers starved by memory", PERFORMANCE, _lost(frac, m), frac,
                what=what + ": every stage was in flight, so the loads take longer than the stages cover.",
                where=where,
                why=f"the consumers' {_tags_text(tags)} and, at the same time, the producers' {_tags_text(ptags)}.",
                remedy="hide more load latency: more pipeline stages"
                       + (f" (now {stages})" if stages else "") + ", larger k-blocks, or better L2 reuse "
                       "(a tile order that keeps operands in L2: --order hilbert; cluster multicast).",
                why_tags={**tags, **ptags}, figure="tensor-core",
                details={"wait_gap_ns": wait_gap, "producer_waiting_share": share}))
        else:
            self.add(Finding(
                cause, "Consumers starved by the producer", PERFORMANCE, _lost(frac, m), frac,
                what=what + ": free stages were there to fill, so the producer issued its loads late.",
                where=where,
                why=f"the consumers' {_tags_text(tags)}, while the producers were not waiting for a stage.",
                remedy="let the producer run ahead: start the next tile's loads before the current epilogue, keep "
                       "tile claims and address arithmetic off the producer warp, and check its register budget.",
                why_tags=tags, figure="tensor-core",
                details={"wait_gap_ns": wait_gap, "producer_waiting_share": share}))

    def epilogue(self):
        m, tr = self.m, self.tr
        epi_gap = m.tensor_core.gap_attribution_ns.get("epilogue", 0)
        frac = epi_gap / m.tensor_core.capacity_ns
        self.check("serialized_epilogue", frac, EPILOGUE_MIN, frac >= EPILOGUE_MIN)
        if frac < EPILOGUE_MIN:
            return
        tiles = m.tail_wave.tiles
        sms = int((m.load_balance.per_sm["busy_ns"] > 0).sum()) or m.sms_recorded
        per_tile = epi_gap / tiles if tiles else None
        tags = tr.tags_of(tr.consumer & (tr.group == _G["epilogue"]) & tr.nonempty)
        mean_epi = m.epilogue.epilogue_ns / max(m.epilogue.spans, 1)
        # If every epilogue ran under the next tile's mainloop, each SM gets its epilogue gaps back.
        saving = int(epi_gap / sms)
        estimate = {"source": "metrics", "change": "epilogue fully overlapped with the next mainloop",
                    "saving_ns": saving, "kernel_change": -saving / m.duration_ns,
                    "text": f"fully overlapped epilogue: up to {format_ns(saving)} per SM, kernel up to "
                            f"{-100 * saving / m.duration_ns:+.1f} % (from the metrics: the epilogue gaps per SM that "
                            "ran MMAs)"}
        per_tile_text = f", about {format_ns(per_tile)} per tile" if per_tile else ""
        self.add(Finding(
            "serialized_epilogue", "Serialized epilogue", PERFORMANCE, _lost(frac, m), frac,
            what=f"the consumers run the epilogue between MMAs and the tensor cores wait for it: epilogue spans "
                 f"leave {_pct(frac)} of P·D of gaps{per_tile_text} ({_pct(epi_gap / max(m.tensor_core.gap_ns, 1), 0)} "
                 f"of all gaps between MMAs). Epilogue overlap is {_pct(m.epilogue.overlap, 0)}: of "
                 f"{format_ns(m.epilogue.epilogue_ns)} of epilogue ({m.epilogue.spans} spans, "
                 f"{format_ns(mean_epi)} each) only {format_ns(m.epilogue.overlapped_ns)} ran under MMAs.",
            where=Where(f"{sms} SMs, at every tile boundary ({tiles} tiles).", sm_count=sms, tile_count=tiles or None,
                        window_ns=(0, m.duration_ns)),
            why=f"the consumers' {_tags_text(tags)} cover{'s' if len(tags) == 1 else ''} the gaps.",
            remedy="hide the epilogue under the next tile's mainloop: two consumer warpgroups in ping-pong (one's "
                   "epilogue under the other's MMAs), or a second accumulator with dedicated epilogue warps, and "
                   "a TMA store whose completion is waited for only before the buffer is reused.",
            why_tags=tags, estimate=estimate, figure="tensor-core",
            details={"epilogue_gap_ns": epi_gap, "epilogue_overlap": m.epilogue.overlap}))

    def fixup(self):
        """Split tiles' fix-up (partial stores, waits for the other segments, the adds) after each SM's
        last MMA: the SM's tensor cores are done and it still works on the tile. (A partial stored
        between MMAs is a gap that serialized_epilogue counts.)"""
        m, tr = self.m, self.tr
        if not self.split_k():
            return self.skip("stream_k_fixup", "no partial tiles passed between CTAs")
        # Each SM's last MMA, from the tensor-core tail the metrics measured (D minus it, after T0).
        per_sm_tc = m.load_balance.per_sm
        with_mma = per_sm_tc["busy_ns"].to_numpy() > 0
        if not with_mma.any():
            return self.skip("stream_k_fixup", "no SM recorded an MMA")
        mma_last = m.t0_ns + m.duration_ns - per_sm_tc["tc_tail_ns"].to_numpy().astype(np.int64)
        last = np.where(with_mma, mma_last, np.iinfo(np.int64).max)  # no MMA: nothing comes after
        span_last = last[tr.sm_idx]
        codes = [tr.tag_names.index(t) for t in _FIXUP_TAGS if t in tr.tag_names]
        after = np.isin(tr.tag_codes, codes) & (tr.end > span_last)
        clipped = np.maximum(tr.start, span_last)

        def per_sm(mask):  # union of the selected spans after each SM's last MMA, ns per SM index
            us, ue = tr.composite_union(mask, clipped)
            return np.bincount(us // tr.width, weights=ue - us, minlength=len(tr.sm_ids))

        total = per_sm(after)
        frac = float(total.sum() / m.tensor_core.capacity_ns)
        self.check("stream_k_fixup", frac, FIXUP_MIN, frac >= FIXUP_MIN)
        if frac < FIXUP_MIN:
            return
        fixing = total > 0
        mean = float(total[fixing].mean())
        parts = []
        for tag, label in zip(_FIXUP_TAGS, ("partial stores", "waits for the other segments", "adds (reduce)")):
            if tag in tr.tag_names:
                t = per_sm(after & (tr.tag_codes == tr.tag_names.index(tag)))
                parts.append(f"{label} {format_ns(float(t[fixing].mean()))}")
        # With no fix-up, each SM would end at its last MMA: the kernel at the latest of those (an upper
        # bound on the saving: the MMAs' own time would not move).
        ends = np.full(len(tr.sm_ids), -1, np.int64)
        sm_keys, _, sm_end = intervals.group_min_max(tr.sm_idx, tr.start, tr.end)
        ends[sm_keys] = sm_end  # an SM without MMAs keeps its own end
        ends[with_mma] = mma_last[with_mma]
        new_end = int(ends.max() - tr.t0)
        saving = max(0, m.duration_ns - new_end)
        estimate = None
        if saving > 0:
            estimate = {"source": "metrics", "change": "no fix-up after the last MMA", "saving_ns": saving,
                        "kernel_change": -saving / m.duration_ns,
                        "text": f"no fix-up: D {format_ns(m.duration_ns)} → ~{format_ns(new_end)}, kernel up to "
                                f"{-100 * saving / m.duration_ns:+.0f} % (from the metrics: each SM ending at its last MMA; "
                                "an upper bound)"}
        sms = tr.sm_ids[fixing]
        worst = np.argsort(-total[fixing], kind="stable")[:NAMED]
        window = (int(clipped[after].min() - tr.t0), int(tr.end[after].max() - tr.t0))
        tags = tr.tags_of(after & tr.nonempty)
        self.add(Finding(
            "stream_k_fixup", "Split tiles' fix-up after the last MMA", PERFORMANCE, _lost(frac, m), frac,
            what=f"after its last MMA each of {int(fixing.sum())} SMs spends {format_ns(mean)} on average (up to "
                 f"{format_ns(float(total.max()))}) passing partial tiles, {_pct(frac)} of P·D: " + ", ".join(parts)
                 + " (per SM, mean; the consumer warpgroups' spans overlap).",
            where=Where(f"{_window_text(window, m.duration_ns)}; the longest: {_sm_list(sms[worst], len(sms))}.",
                        sms=tuple(int(s) for s in sms[worst]), sm_count=int(fixing.sum()), window_ns=window),
            why=f"spans with the {_tags_text(tags)} fill the time after the last MMA.",
            remedy="move fewer partial bytes: a smaller tile (a partial is the tile's area in fp32: a 64×64 tile's is a "
                   "quarter of a 128×128 tile's) or fewer segments a tile; the waits end with the slowest segment, so "
                   "give the segments equal work; where the waves allow, whole tiles need no fix-up.",
            why_tags=tags, estimate=estimate, figure="timeline",
            details={"fixup_mean_ns": mean, "fixup_max_ns": float(total.max()), "sms": int(fixing.sum())}))

    def head(self):
        m, tr = self.m, self.tr
        per_sm = m.load_balance.per_sm
        with_mma = per_sm["busy_ns"].to_numpy() > 0
        if not with_mma.any():
            return self.skip("long_head", "no SM recorded an MMA")
        head_all = per_sm["head_ns"].to_numpy().astype(np.int64)
        head = head_all[with_mma]
        frac = float(head.sum() / m.tensor_core.capacity_ns)
        self.check("long_head", frac, HEAD_MIN, frac >= HEAD_MIN)
        if frac < HEAD_MIN:
            return
        # The head of each SM: launch (T0 to its first span), setup, then the first loads until its first MMA.
        _, first, _ = intervals.group_min_max(tr.sm_idx, tr.start, tr.end)
        setup_keys, _, setup_end = intervals.group_min_max(np.where(tr.group == _G["setup"], tr.sm_idx, -1),
                                                           tr.start, tr.end)
        first_mma = head + m.t0_ns  # absolute time of each SM's first MMA (SMs with MMAs)
        first = first[with_mma]
        setup = np.full(len(tr.sm_ids), -1, np.int64)
        setup[setup_keys] = setup_end
        setup = setup[with_mma]
        setup = np.where(setup >= 0, np.clip(setup, first, first_mma), first)
        # Spans before their own SM's first MMA are the head's; a tile claim there is its own part.
        span_first_mma = (head_all + m.t0_ns)[tr.sm_idx]
        in_head = (tr.start < span_first_mma) & tr.nonempty & (tr.group != _G["mma"])
        claims = in_head & (tr.group == _G["schedule"])
        claim_ns = np.bincount(tr.sm_idx[claims], weights=(np.minimum(tr.end, span_first_mma) - tr.start)[claims],
                               minlength=len(tr.sm_ids))[with_mma]
        launch = float((first - m.t0_ns).mean())
        setup_t = float((setup - first).mean())
        claim_t = float(np.minimum(claim_ns, first_mma - setup).mean())
        loads = float((first_mma - setup).mean()) - claim_t
        sms = per_sm["sm"].to_numpy()[with_mma]
        worst = np.argsort(-head, kind="stable")[:NAMED]
        tags = tr.tags_of(in_head & (tr.group != _G["other"]))
        claim_text = f", first tile claim {format_ns(claim_t)}" if claim_t > 0 else ""
        self.add(Finding(
            "long_head", "Long head before the first MMA", PERFORMANCE, _lost(frac, m), frac,
            what=f"each SM waits {format_ns(head.mean())} on average (up to {format_ns(head.max())}) from T0 to its "
                 f"first MMA, {_pct(frac)} of P·D in a {format_ns(m.duration_ns)} kernel: launch skew "
                 f"{format_ns(launch)}, setup {format_ns(setup_t)}{claim_text}, first loads {format_ns(loads)}.",
            where=Where(f"T0 to T0 + {format_ns(head.max())}; the latest to start: {_sm_list(sms[worst], len(sms))}.",
                        sms=tuple(int(s) for s in sms[worst]), sm_count=len(sms), window_ns=(0, int(head.max()))),
            why=f"spans with the {_tags_text(tags)} fill the head.",
            remedy=_head_remedy(launch, setup_t, loads, claim_t),
            why_tags=tags, figure="timeline",
            details={"head_mean_ns": float(head.mean()), "launch_ns": launch, "setup_ns": setup_t,
                     "first_claim_ns": claim_t, "first_loads_ns": loads}))

    def uneven(self):
        m = self.m
        tiles = m.tiles
        if len(tiles) < 2:
            return self.skip("uneven_tiles", "fewer than two tiles")
        d = tiles["duration_ns"].to_numpy(np.int64)
        med = float(np.median(d))
        if med <= 0:
            return self.skip("uneven_tiles", "tiles take no time")
        slow = d >= SLOW_TILE * med
        excess = float((d[slow] - med).sum())
        frac = excess / m.tensor_core.capacity_ns
        sm = tiles["sm"].to_numpy()
        sm_median = tiles.groupby("sm", sort=True)["duration_ns"].median()
        slow_sms = sm_median.index.to_numpy()[sm_median.to_numpy() >= SLOW_SM * float(sm_median.median())]
        self.check("uneven_tiles", frac, UNEVEN_MIN, frac >= UNEVEN_MIN)
        if frac < UNEVEN_MIN:
            return
        order = np.argsort(-d, kind="stable")[:NAMED]
        named = [f"tile {int(tiles['tile'].iloc[i])} on SM {int(sm[i])} ({format_ns(d[i])})" for i in order]
        per_sm = m.load_balance.per_sm
        ran = per_sm[per_sm["tiles"] > 0]
        last_sm = int(ran.sort_values("finish_ns", ascending=False, kind="stable")["sm"].iloc[0]) if len(ran) else None
        on_last = slow & (sm == last_sm)
        estimate = None
        if on_last.any():
            back = int((d[on_last] - med).sum())
            estimate = {"source": "metrics", "change": f"the slow tiles on SM {last_sm} at the median duration",
                        "saving_ns": back, "kernel_change": -back / m.duration_ns,
                        "text": f"SM {last_sm} finishes last; at the median tile time its slow tiles would give back "
                                f"~{format_ns(back)}, kernel up to {-100 * back / m.duration_ns:+.1f} % (from the metrics)"}
        sm_text = ""
        if slow_sms.size:
            sm_text = f"; slow SMs (median tile ≥ {SLOW_SM:.2f}× the SMs' median): {_sm_list(slow_sms)}"
        self.add(Finding(
            "uneven_tiles", "Uneven tile durations", PERFORMANCE, _lost(frac, m), frac,
            what=f"{int(slow.sum())} of {len(d)} tiles took at least {SLOW_TILE:g}× the median tile time "
                 f"({format_ns(med)}); their time beyond the median is {_pct(frac)} of P·D.",
            where=Where("slowest: " + "; ".join(named) + sm_text + ".",
                        sms=tuple(int(s) for s in (slow_sms if slow_sms.size else np.unique(sm[order]))),
                        tiles=tuple(int(tiles["tile"].iloc[i]) for i in order), tile_count=int(slow.sum())),
            why="the slow tiles' own spans (their MMAs and waits) take longer; see the timeline of the SMs named.",
            remedy="look at what the slow tiles share: their place in the output (edge tiles, a partial last "
                   "tile), their SM (a slow or throttled SM shows as a slow SM above), or when they ran (tiles "
                   "that start together contend for L2 and memory).",
            estimate=estimate, figure="tile-durations",
            details={"median_tile_ns": med, "slow_tiles": int(slow.sum()), "slow_sms": [int(s) for s in slow_sms]}))


def _head_remedy(launch: float, setup: float, loads: float, claim: float = 0.0) -> str:
    """The remedy for a long head, the largest part of it first."""
    parts = {
        "loads": "issue the first stages' loads as early as possible (before the other warps' setup) and prefetch "
                 "the tensor maps (prefetch.tensormap)",
        "setup": "shorten the setup (barrier init, tensor-map fetch, register reconfiguration) or overlap it with the "
                 "previous kernel through programmatic dependent launch (griddepcontrol.wait after the setup)",
        "launch": "start the CTAs together: smaller clusters or fewer CTAs per SM wave start sooner",
        "claim": "make the first tile a given (tile = CTA index) and claim only from the second tile on",
    }
    size = {"loads": loads, "setup": setup, "launch": launch, "claim": claim}
    order = sorted(parts, key=lambda k: -size[k])
    main = {"loads": "the first loads are", "setup": "the setup is", "launch": "the launch skew is",
            "claim": "the first tile claim is"}[order[0]]
    return (f"{parts[order[0]]} ({main} most of the head); then {parts[order[1]]}. A longer kernel (more work "
            "per CTA) pays the head once over more work.")


def _tile_options(meta: dict, P: int) -> str:  # noqa: N803
    """Other tile shapes and how full their last wave would be (from the shape and the tile)."""
    shape, tile = _dict(meta, "shape"), _dict(meta, "launch").get("tile")
    dims = [_number(shape.get(k)) for k in "MN"]
    if None in dims or not isinstance(tile, (list, tuple)) or len(tile) < 2:
        return ""
    M, N = int(dims[0]), int(dims[1])  # noqa: N806
    bm, bn = int(tile[0]), int(tile[1])
    out = []
    for cm, cn in ((bm, bn // 2), (bm // 2, bn), (bm // 2, bn // 2)):
        if cm < 64 or cn < 64 or (cm, cn) == (bm, bn):
            continue
        n = math.ceil(M / cm) * math.ceil(N / cn)
        waves = n / P
        fill = waves / math.ceil(waves)
        out.append((fill, f"{cm}×{cn}: {n} tiles, {waves:.2f} waves, {_pct(fill, 0)} of the waves filled"))
    out.sort(key=lambda x: -x[0])
    return "; ".join(text for _, text in out[:2])


# -- entry points --------------------------------------------------------------------------------
_TRUST_ORDER = ("dropped_records", "incomplete_regions", "no_mma_spans", "validation_mismatch", "profiler_overhead",
                "sm_clock", "timing_spread")


def _evaluate(run, metrics: Metrics | None) -> tuple[Metrics, list[Finding], list[Check], _Rules]:
    m = metrics if metrics is not None else compute_metrics(run)
    rules = _Rules(run, m)
    for rule in (rules.dropped, rules.incomplete, rules.no_mma, rules.validation, rules.overhead, rules.clock,
                 rules.spread, rules.too_few_tiles, rules.scheduler, rules.tail_wave, rules.starved, rules.epilogue,
                 rules.fixup, rules.head, rules.uneven):
        rule()
    trust = sorted((f for f in rules.findings if f.kind == TRUST), key=lambda f: _TRUST_ORDER.index(f.cause))
    perf = sorted((f for f in rules.findings if f.kind == PERFORMANCE), key=lambda f: -(f.lost_ns or 0))
    findings = trust + [_with_spread(f, rules.timing) for f in perf]
    return m, findings, rules.checks, rules


def _with_spread(f: Finding, timing: Timing) -> Finding:
    """Mark an estimated saving smaller than the run-to-run spread: a timing could not confirm it."""
    if not f.estimate or timing.spread_ms is None or timing.kernel_ms is None:
        return f
    change = f.estimate.get("kernel_change")
    if change is None or abs(change) * timing.kernel_ms > timing.spread_ms:
        return f
    est = dict(f.estimate, within_spread=True)
    est["text"] += f"; smaller than the run-to-run spread of {timing.spread_ms * 1e3:.2f} µs, so a timing cannot confirm it"
    return dataclasses.replace(f, estimate=est)


def find(run, metrics: Metrics | None = None) -> list[Finding]:
    """The run's findings, ranked: trust warnings first, then performance findings by time lost."""
    return _evaluate(run, metrics)[1]


def explain(run, metrics: Metrics | None = None) -> Explanation:
    """The run's findings with a headline: how busy the tensor cores were and what costs the most."""
    m, findings, checks, rules = _evaluate(run, metrics)
    t = rules.timing
    perf = [f for f in findings if f.kind == PERFORMANCE]
    timed = ""
    if t.kernel_ms:
        timed = f", {t.kernel_ms * 1e3:.1f} µs timed" + (f" at {t.tflops:.0f} TFLOP/s" if t.tflops else "")
    head = (f"{m.label}: tensor cores busy {_pct(m.tensor_core.busy_fraction)} of P·D over D = "
            f"{format_ns(m.duration_ns)} on {m.sm_count} SMs{timed}.")
    if perf:
        total = sum(f.lost_fraction or 0 for f in perf)
        head += (f" {len(perf)} finding{'s account' if len(perf) > 1 else ' accounts'} for {_pct(total)} of P·D; "
                 f"the largest is {_lower(perf[0].title)} ({_pct(perf[0].lost_fraction)}).")
    else:
        measured = [c for c in checks if c.value is not None and c.threshold and c.cause not in _TRUST_ORDER]
        nearest = max(measured, key=lambda c: c.value / c.threshold, default=None)
        head += " No cause reaches its threshold, so this run looks healthy"
        if nearest is not None:
            head += (f" (the nearest: {nearest.cause.replace('_', ' ')} at {_pct(nearest.value)}, threshold "
                     f"{_pct(nearest.threshold, 0)})")
        head += "."
    trust = [f for f in findings if f.kind == TRUST]
    if trust:
        named = ", ".join(_lower(f.title) for f in trust)
        head += f" Read it with {len(trust)} trust warning{'s' if len(trust) > 1 else ''} in mind ({named})."
    return Explanation(m.label, head, tuple(findings), tuple(checks))


# -- two runs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mover:
    """One part of D (per SM, in ns) in both runs: busy, head, a gap group, tc tail."""

    key: str
    label: str
    a_ns: float
    b_ns: float
    a_fraction: float
    b_fraction: float

    @property
    def delta_ns(self) -> float:
        return self.b_ns - self.a_ns


@dataclass(frozen=True, eq=False)
class PairExplanation:
    labels: tuple[str, str]
    verdict: str
    sentences: tuple[str, ...]
    movers: tuple[Mover, ...]  # the parts of D, largest change first
    within_spread: bool | None  # the timed difference is within the recorded run-to-run spread
    change: float | None  # b / a - 1 of the kernel time (or D, or TFLOP/s for different shapes)
    a: Explanation
    b: Explanation

    def text(self, width: int = 100) -> str:
        parts = [f"A = {self.labels[0]}; B = {self.labels[1]}."]
        parts += [textwrap.fill(s, width=width, break_on_hyphens=False) for s in (self.verdict, *self.sentences)]
        parts.append(f"A = {self.labels[0]}:\n" + self.a.short())
        parts.append(f"B = {self.labels[1]}:\n" + self.b.short())
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable({
            "labels": list(self.labels), "verdict": self.verdict, "sentences": list(self.sentences),
            "within_spread": self.within_spread, "change": self.change,
            "movers": [{"key": mv.key, "label": mv.label, "a_ns": mv.a_ns, "b_ns": mv.b_ns, "delta_ns": mv.delta_ns,
                        "a_fraction": mv.a_fraction, "b_fraction": mv.b_fraction} for mv in self.movers],
            "a": self.a.to_dict(), "b": self.b.to_dict(),
        })


def _parts(m: Metrics) -> dict[str, tuple[str, float, float]]:
    """D split per SM into busy, head, gaps by group and tc tail: key -> (label, ns per SM, fraction of P·D)."""
    tc, D = m.tensor_core, m.duration_ns
    out = {"busy": ("tensor-core busy time", tc.busy_fraction * D, tc.busy_fraction),
           "head": ("head before the first MMA", tc.head_fraction * D, tc.head_fraction)}
    for g, frac in tc.gap_attribution.items():
        out[f"gap_{g}"] = (f"gaps covered by {g}" if g != "unattributed" else "unattributed gaps", frac * D, frac)
    out["tc_tail"] = ("tensor-core tail after the last MMA", tc.tc_tail_fraction * D, tc.tc_tail_fraction)
    return out


def explain_pair(run_a, run_b, comparison: Comparison | None = None) -> PairExplanation:
    """Why B is faster or slower than A: the timed difference against the recorded spread, then the
    parts of D that moved most (per SM, they sum exactly to the change in D), then the findings one
    run has and the other lacks. `comparison`: compare([run_a, run_b]), when the caller has it."""
    comparison = comparison if comparison is not None else compare([run_a, run_b])
    ma, mb = comparison.metrics
    ea, eb = explain(run_a, ma), explain(run_b, mb)
    ta, tb = comparison.timings
    la, lb = ma.label, mb.label
    same_shape = _dict(run_a.meta, "shape") == _dict(run_b.meta, "shape")

    within, change = None, None
    if same_shape and ta.kernel_ms and tb.kernel_ms:
        row = comparison.row("kernel_ms")
        within = row.within_spread[1]
        change = tb.kernel_ms / ta.kernel_ms - 1
        spreads = [s for s in (ta.spread_ms, tb.spread_ms) if s is not None]
        noise = f"{max(spreads) * 1e3:.2f} µs" if spreads else None
        what = (f"B is {_pct(abs(change))} {'slower' if change > 0 else 'faster'} than A: "
                f"{tb.kernel_ms * 1e3:.2f} vs {ta.kernel_ms * 1e3:.2f} µs timed")
        if within:
            verdict = (f"{what}, within the recorded run-to-run spread ({noise}): the timings do not tell the two "
                       "apart, and the differences below are one traced launch each.")
        elif within is False:
            verdict = f"{what}, outside the recorded run-to-run spread ({noise})."
        else:
            verdict = f"{what} (no run-to-run spread recorded, so it is not known whether that is noise)."
    elif not same_shape and ta.tflops and tb.tflops:
        change = tb.tflops / ta.tflops - 1
        verdict = (f"The runs have different shapes, so compare throughput: B reaches {tb.tflops:.0f} TFLOP/s against "
                   f"A's {ta.tflops:.0f} ({100 * change:+.1f} %).")
    else:
        change = mb.duration_ns / ma.duration_ns - 1
        verdict = (f"No timings to compare, so by the traces alone: B's D is {format_ns(mb.duration_ns)} against A's "
                   f"{format_ns(ma.duration_ns)} ({100 * change:+.1f} %, one traced launch each, no spread).")

    pa, pb = _parts(ma), _parts(mb)
    movers = [Mover(k, (pa.get(k) or pb.get(k))[0], pa.get(k, ("", 0.0, 0.0))[1], pb.get(k, ("", 0.0, 0.0))[1],
                    pa.get(k, ("", 0.0, 0.0))[2], pb.get(k, ("", 0.0, 0.0))[2])
                for k in dict.fromkeys([*pa, *pb])]
    movers.sort(key=lambda mv: -abs(mv.delta_ns))
    dd = mb.duration_ns - ma.duration_ns
    sentences = []
    big = [mv for mv in movers if abs(mv.delta_ns) >= 0.1 * max(abs(dd), 1) or abs(mv.delta_ns) >= 0.01 * ma.duration_ns][:3]
    if big:
        moves = "; ".join(f"{mv.label} {'+' if mv.delta_ns >= 0 else '−'}{format_ns(abs(mv.delta_ns))} "
                          f"({_pct(mv.a_fraction)} → {_pct(mv.b_fraction)} of P·D)" for mv in big)
        sentences.append(f"In the traces D {'grew' if dd >= 0 else 'shrank'} by {format_ns(abs(dd))} "
                         f"({format_ns(ma.duration_ns)} → {format_ns(mb.duration_ns)}). Per SM, the parts of D that "
                         f"moved most: {moves}.")
    if change is not None and same_shape and dd and (dd > 0) != (change > 0) and not within:
        sentences.append("The traced launches disagree in direction with the timed ones: one traced launch each, so "
                         "trust the timing for the verdict and the traces for where the time goes.")
    others = []
    for key, label, unit in (("epilogue_overlap", "epilogue overlap", "fraction"),
                             ("mean_occupancy", "mean occupancy", "fraction"),
                             ("tail_wave_ns", "tail wave", "ns"), ("finish_spread_ns", "finish-time spread", "ns")):
        va, vb = ma.scalars().get(key), mb.scalars().get(key)
        if va is None or vb is None:
            continue
        moved = abs(vb - va) >= (0.02 if unit == "fraction" else 0.05 * max(abs(va), 1))
        if moved:
            others.append(f"{label} {_pct(va) if unit == 'fraction' else format_ns(va)} → "
                          f"{_pct(vb) if unit == 'fraction' else format_ns(vb)}")
    if others:
        sentences.append("Also moved: " + "; ".join(others) + ".")
    causes_a = {f.cause: f for f in ea.findings if f.kind == PERFORMANCE}
    causes_b = {f.cause: f for f in eb.findings if f.kind == PERFORMANCE}
    only_b = [f for c, f in causes_b.items() if c not in causes_a]
    only_a = [f for c, f in causes_a.items() if c not in causes_b]
    for who, only in (("B", only_b), ("A", only_a)):
        if only:
            sentences.append(f"Only {who}: " + "; ".join(f"{_lower(f.title)} ({_pct(f.lost_fraction)} of P·D)"
                                                          for f in only) + ".")
    both = [(causes_a[c], f) for c, f in causes_b.items()
            if c in causes_a and abs((f.lost_fraction or 0) - (causes_a[c].lost_fraction or 0)) >= 0.01]
    if both:
        sentences.append("In both, changed: " + "; ".join(
            f"{_lower(fb.title)} {_pct(fa.lost_fraction)} → {_pct(fb.lost_fraction)} of P·D" for fa, fb in both) + ".")
    return PairExplanation((la, lb), verdict, tuple(sentences), tuple(movers), within, change, ea, eb)


def explain_runs(runs: list) -> Explanation | PairExplanation:
    """One run: its findings. Two runs: why the second is faster or slower than the first."""
    runs = list(runs)
    if len(runs) == 1:
        return explain(runs[0])
    if len(runs) == 2:
        return explain_pair(*runs)
    raise GemmtraceError(f"explain takes one run or two (A and B), not {len(runs)}.")


__all__ = ["Check", "Explanation", "Finding", "Mover", "PERFORMANCE", "PairExplanation", "TRUST", "Where", "explain",
           "explain_pair", "explain_runs", "find"]
