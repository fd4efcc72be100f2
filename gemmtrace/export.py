"""Export a run as a Perfetto trace (.perfetto-trace) or a Chrome Trace Event Format file (.json.gz).

Both open in ui.perfetto.dev; docs/export.md describes the layout and the metadata. One process per
SM, one track per warp role in it (more where a role's spans overlap), slices named by tag with the
tile, k-block (and CTA, where an SM ran several) as arguments, a counter track per counter, and the
launch metadata.

Millions of spans are encoded with numpy, never one message or json.dumps per span: every span
becomes a record of one shape (a BEGIN and an END TracePacket, or one "X" event), built field by
field as rows (row r holds byte r, for JSON 4-byte word r, of every record) and transposed so that
each record's bytes are contiguous. Chunks of spans are encoded (and deflated) on all cores at once; the gzip
stream goes through ISA-L (the `isal` package) when it is installed, about 4x faster than zlib.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pandas as pd

try:  # ISA-L's deflate: ~4x zlib's speed at the same ratio (optional: pip install isal)
    from isal import isal_zlib as _deflate
except ImportError:
    _deflate = zlib

from .paths import GemmtraceError
from .trace import Run, _json_default

FORMATS = ("perfetto", "chrome")
PID_BASE = 1000  # SM s is process PID_BASE + s: trace viewers take pid 0 for the idle process
LAUNCH_PID = 1  # Chrome: the process holding the launch metadata slice and the counters
LAYOUT_CHUNK = 1 << 20  # spans placed on tracks at a time, in runs of whole tracks
CHUNK_SPANS = 1 << 14  # spans encoded per task: small temporaries are reused, not mapped anew
GZIP_LEVEL = 1  # on this text: zlib ~340 MB/s a core, isal ~1.2 GB/s; zlib's level 6 is 5x slower for 20% less
SPAN_ARGS = ("tile", "kblock", "cta")  # slice arguments, each only where it applies (see docs)
SEQUENCE_ID = 1  # the one Perfetto packet sequence: interned names are valid on it

_REQUIRED = ("sm", "cta", "warp", "role", "tag", "tile", "kblock", "start_ns", "end_ns")


# --------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------
def export(
    run: Run,
    path: str | Path,
    fmt: str,
    counters: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    metadata: dict | None = None,
) -> Path:
    """Write `run` as a trace file and return its path.

    fmt: "perfetto" (protobuf) or "chrome" (gzipped JSON). counters: track name -> (t_ns, value)
    step arrays in the spans' time base (value[i] holds from t_ns[i]). metadata: extra keys merged
    over run.meta. Trace times are ns (Chrome: us) since the earliest span start, T0.
    """
    if fmt not in FORMATS:
        raise GemmtraceError(f"unknown trace format {fmt!r}; choose perfetto or chrome.")
    layout = layout_tracks(_checked_spans(run))
    counters = {name: (t - layout.t0, v) for name, (t, v) in _checked_counters(counters).items()}
    for name, (t, _) in counters.items():
        if len(t) and t.min() < 0:
            raise GemmtraceError(f"counter {name!r} has times before the run's first span.")
    meta = flatten_metadata({**(getattr(run, "meta", None) or {}), **(metadata or {})})
    meta.update({
        "export.spans": str(len(layout.order)),
        "export.tracks": str(len(layout.tracks)),
        "export.extra_tracks": str(int((layout.tracks["slot"] > 0).sum())),
        "export.duration_ns": str(layout.duration),
        "export.time_base": "ns since the earliest span start (T0)",
    })
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    writer = _write_perfetto if fmt == "perfetto" else _write_chrome
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            writer(f, layout, counters, meta, _label(run))
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise GemmtraceError(f"cannot write the {fmt} trace {path}: {e.strerror or type(e).__name__}.") from None
    except BaseException:
        _remove(tmp)
        raise
    return path


def flatten_metadata(meta: dict, prefix: str = "") -> dict[str, str]:
    """Nested metadata as flat 'a.b.c' -> string pairs (strings as they are, the rest as JSON)."""
    out: dict[str, str] = {}
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_metadata(value, name + "."))
        elif isinstance(value, str):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=_jsonable)
    return out


def _jsonable(o):
    try:
        return _json_default(o)
    except TypeError:
        return str(o)


def _remove(p: Path) -> None:
    try:
        p.unlink(missing_ok=True)
    except OSError:
        pass


def _label(run) -> str:
    try:
        return str(run.label)
    except Exception:  # a run-like object without the Run helpers
        return "launch"


def _checked_spans(run) -> pd.DataFrame:
    spans = getattr(run, "spans", None)
    if not isinstance(spans, pd.DataFrame):
        raise GemmtraceError("cannot export: the run has no spans table.")
    missing = [c for c in _REQUIRED if c not in spans.columns]
    if missing:
        raise GemmtraceError(f"cannot export: the spans table lacks the column(s) {', '.join(missing)}.")
    if len(spans) == 0:
        raise GemmtraceError("cannot export an empty run: it has no spans.")
    bad = int(np.count_nonzero(spans["end_ns"].to_numpy() < spans["start_ns"].to_numpy()))
    if bad:
        raise GemmtraceError(f"cannot export: {bad} spans end before they start, so the run is corrupt.")
    if min(int(spans[c].min()) for c in ("sm", "cta", "warp")) < 0:
        raise GemmtraceError("cannot export: the spans hold a negative SM, CTA or warp id, so the run is corrupt.")
    return spans


def _checked_counters(counters) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for name, pair in (counters or {}).items():
        try:
            t, v = (np.asarray(a) for a in pair)
            ok = t.ndim == v.ndim == 1 and len(t) == len(v) and t.dtype.kind in "iuf" and v.dtype.kind in "iufb"
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise GemmtraceError(f"counter {name!r} must be a pair of equal-length numeric arrays (t_ns, value).")
        out[str(name)] = (t.astype(np.int64), v.astype(np.float64))
    return out


# --------------------------------------------------------------------------------------------
# Track layout
# --------------------------------------------------------------------------------------------
@dataclass
class TrackLayout:
    """Spans placed on tracks. Per-span arrays are in emission order: grouped by SM, role and warp,
    and each track's spans in time order."""

    order: np.ndarray  # rows of the spans table
    track: np.ndarray  # row of `tracks`
    start: np.ndarray  # ns since T0
    end: np.ndarray
    tracks: pd.DataFrame  # display order; columns sm, role, warp, slot, name, rank, cta_arg
    tag_names: list[str]
    role_names: list[str]
    t0: int  # the spans' earliest start, subtracted from every time
    duration: int
    columns: dict[str, np.ndarray]  # tag codes, tile, kblock, cta in table order (see chunk())

    def chunk(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Emitted spans lo..hi with all their columns (gathered per chunk, on the encoding cores)."""
        rows = self.order[lo:hi]
        out = {k: v[rows].astype(np.int64) for k, v in self.columns.items()}
        out.update(track=self.track[lo:hi], start=self.start[lo:hi], end=self.end[lo:hi])
        return out


def layout_tracks(spans: pd.DataFrame) -> TrackLayout:
    """Place spans on tracks so that slices on one track never overlap.

    A track holds one warp role of one SM (one per warp index where the role has several warps).
    Where that role's spans overlap in time they go to extra tracks: first whole CTAs (CTAs
    resident together on the SM get a track each; CTAs that ran one after another share one),
    then single spans (one warp's asynchronous MMAs that cross each other).
    """
    sm, warp, cta = (spans[c].to_numpy() for c in ("sm", "warp", "cta"))
    role, role_names = _codes(spans["role"])
    tag, tag_names = _codes(spans["tag"])
    start = spans["start_ns"].to_numpy().astype(np.int64, copy=False)
    end = spans["end_ns"].to_numpy().astype(np.int64, copy=False)
    t0 = int(start.min())
    if t0:
        start, end = start - t0, end - t0

    # A lane is one warp of one CTA; a group, one warp index of one role on one SM. Dense ids
    # follow (SM, role, warp, CTA) order, which is the display order.
    lane, (lane_sm, lane_role, lane_warp, lane_cta) = _dense_rows([sm, role, warp, cta])
    n_lanes = len(lane_sm)
    group, _ = _dense_rows([lane_sm, lane_role, lane_warp])
    lane_start = np.full(n_lanes, np.iinfo(np.int64).max)
    np.minimum.at(lane_start, lane, start)
    lane_end = np.zeros(n_lanes, np.int64)
    np.maximum.at(lane_end, lane, end)
    by = np.lexsort((lane_end > lane_start, lane_start, group))
    lane_slot = np.empty(n_lanes, np.int64)
    lane_slot[by] = _fifo_slots(group[by], lane_start[by], lane_end[by])

    # Provisional tracks: (group, lane slot), sorted by start; zero-length spans first among
    # spans that start together. Then split, a run of whole tracks at a time (small temporaries).
    n_slots = int(lane_slot.max()) + 1
    order, p, s = _sort_by((group * n_slots + lane_slot)[lane], (start << 1) | (end > start))
    s >>= 1
    e = end[order]
    first = np.flatnonzero(np.diff(p, prepend=-1))  # each provisional track's first position
    n = len(p)
    sub = np.zeros(n, np.int64)
    cuts = np.unique(np.append(first[np.searchsorted(first, np.arange(0, n, LAYOUT_CHUNK), side="right") - 1], n))
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        sub[lo:hi] = _split_overlaps(p[lo:hi], s[lo:hi], e[lo:hi])
    slots = np.maximum.reduceat(sub, first) + 1  # tracks per provisional track
    track_base = np.cumsum(slots) - slots
    track = np.repeat(track_base, np.diff(np.append(first, n))) + sub
    # Spans stay in (provisional track, start) order: each track's spans, a subsequence, are in
    # time order, which is all the writers need.
    n_tracks = int(track_base[-1] + slots[-1])
    pos0 = np.full(n_tracks, n)
    np.minimum.at(pos0, track, np.arange(n))
    row0 = order[pos0]  # each track's first span describes it
    lane0 = lane[row0]
    tracks = pd.DataFrame({"sm": lane_sm[lane0], "role": lane_role[lane0], "warp": lane_warp[lane0],
                           "group": group[lane0], "lane_slot": lane_slot[lane0],
                           "sub": np.arange(n_tracks) - np.repeat(track_base, slots)})
    _name_tracks(tracks, group, lane_slot, lane_cta, lane_sm, role_names)
    return TrackLayout(
        order=order, track=track.astype(np.int32), start=s, end=e, tracks=tracks, tag_names=tag_names,
        role_names=role_names, t0=t0, duration=int(e.max()),
        columns={"tag": tag, "tile": spans["tile"].to_numpy(), "kblock": spans["kblock"].to_numpy(), "cta": cta},
    )


def _name_tracks(t: pd.DataFrame, lane_group, lane_slot, lane_cta, lane_sm, role_names) -> None:
    """Add each track's name, slot, rank within its SM, and whether its slices carry the CTA id.

    Names: the role; " w<warp>" where the role has several warps on the SM; where the SM ran
    several CTAs, " cta<id>" for a track that holds one CTA, else " #<k>" for the k-th track of
    that role and warp (which also numbers the extra tracks of crossing spans).
    """
    lanes = pd.DataFrame({"group": lane_group, "lane_slot": lane_slot, "cta": lane_cta})
    per_slot = lanes.groupby(["group", "lane_slot"])["cta"].agg(["nunique", "first"])
    one = per_slot.reindex(pd.MultiIndex.from_arrays([t["group"], t["lane_slot"]]))
    single, single_cta = one["nunique"].to_numpy() == 1, one["first"].to_numpy()
    multi_cta = pd.Series(lane_cta).groupby(lane_sm).nunique().reindex(t["sm"]).to_numpy() > 1
    warps = t.groupby(["sm", "role"])["warp"].transform("nunique").to_numpy()
    in_group = t.groupby("group")["sub"].transform("size").to_numpy()
    in_slot = t.groupby(["group", "lane_slot"])["sub"].transform("size").to_numpy()
    t["slot"] = t.groupby("group").cumcount()
    names = []
    for i, r in enumerate(t.itertuples(index=False)):  # a loop over tracks, not spans
        name = role_names[r.role] + (f" w{r.warp}" if warps[i] > 1 else "")
        if multi_cta[i] and single[i]:
            name += f" cta{single_cta[i]}" + (f" #{r.sub + 1}" if in_slot[i] > 1 else "")
        elif in_group[i] > 1:
            name += f" #{r.slot + 1}"
        names.append(name)
    t["name"] = names
    t["cta_arg"] = multi_cta
    t["rank"] = t.groupby("sm").cumcount()  # order within the SM: role, warp, slot


def _codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes and names of a categorical (or plain) column."""
    cat = column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")
    codes = cat.cat.codes.to_numpy()
    if (codes < 0).any():
        raise GemmtraceError(f"cannot export: the spans' {column.name} column has missing values.")
    return codes, [str(c) for c in cat.cat.categories]


def _bits(x) -> int:
    return max(1, int(np.max(x)).bit_length()) if np.size(x) else 1


def _dense_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Dense ids 0..k-1 of the distinct rows of non-negative integer columns, in lexicographic
    row order, and each column's value for every id."""
    sizes = [int(c.max()) + 1 for c in cols]
    if float(np.prod([float(x) for x in sizes])) >= 2.0**62:
        uniq, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        return inv.reshape(-1), list(uniq.T)
    key = cols[0].astype(np.int64)
    for c, size in zip(cols[1:], sizes[1:]):
        key *= size
        key += c
    top = int(np.prod(sizes))
    if top <= 1 << 24:  # a presence table beats sorting
        present = np.zeros(top, bool)
        present[key] = True
        uniq = np.flatnonzero(present)
        ids = (np.cumsum(present) - 1)[key]
    else:
        uniq, ids = np.unique(key, return_inverse=True)
    values = []
    for size in sizes[::-1]:
        uniq, v = np.divmod(uniq, size)
        values.append(v)
    return ids.reshape(-1), values[::-1]


def _sort_by(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Order that sorts by (major, minor), ties in index order, with both keys in that order.

    The keys and the index are packed into one int64 and sorted by value: numpy's vectorized
    sort of values is ~4x faster than argsort, and the sorted keys come back without a gather.
    """
    n = len(major)
    mb, tb, ib = _bits(major), _bits(minor), _bits(max(n - 1, 0))
    if mb + tb + ib > 63:
        order = np.lexsort((minor, major))
        return order, major[order], minor[order]
    key = np.left_shift(major, tb + ib, dtype=np.int64)
    key |= np.left_shift(minor, ib, dtype=np.int64)
    key |= np.arange(n)
    key.sort()
    order = key & ((1 << ib) - 1)
    key >>= ib
    return order, key >> tb, key & ((1 << tb) - 1)


def _split_overlaps(p: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Slot of each span within its track (0 unless spans of that track overlap).

    Sorted by (track p, start), a span that starts before an earlier span of its track has ended
    crosses or nests in it; only tracks with such spans go through _fifo_slots."""
    width = int(e.max()) + 1
    base = p * width
    reach = np.maximum.accumulate(base + e)  # running max of ends, per track
    overlap = np.zeros(len(p), bool)
    np.less((base + s)[1:], reach[:-1], out=overlap[1:])
    sub = np.zeros(len(p), np.int64)
    if overlap.any():
        bad = np.zeros(int(p[-1]) + 1, bool)
        bad[p[overlap]] = True
        pick = np.flatnonzero(bad[p])
        sub[pick] = _fifo_slots(p[pick], s[pick], e[pick])
    return sub


def _fifo_slots(unit: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Slots such that intervals of one unit sharing a slot never overlap (touching is fine).

    Input grouped by unit and sorted by start within it. Greedy in start order, each interval
    reuses the slot freed first (FIFO), which takes as few slots as the deepest overlap and has a
    closed form: the r-th start that finds a slot free takes the slot freed by the r-th end. So a
    slot passes along parent links, resolved by pointer jumping, with no loop over intervals.
    """
    n = len(unit)
    idx = np.arange(n)
    head = np.ones(n, bool)
    np.not_equal(unit[1:], unit[:-1], out=head[1:])
    first = np.flatnonzero(head)
    rid = np.repeat(np.arange(len(first)), np.diff(np.append(first, n)))  # unit, as 0, 1, 2...
    # Ends in time order; at one time a non-empty interval's end comes before any start, and a
    # zero-length interval's end right after its own start (so after the starts before it).
    # Keys (unit, 2t + 1 for a start or a zero-length end, 2t for other ends, index) in one int64.
    ib = _bits(max(n - 1, 0))
    if _bits(rid) + _bits(end) + 2 + ib > 63:  # rank the times instead (equal stays equal)
        _, inv = np.unique(np.concatenate([start, end]), return_inverse=True)
        start, end = inv[:n].reshape(-1), inv[n:].reshape(-1)
    span = 2 * (int(end.max()) + 1)
    ends = rid * span + 2 * end + (end == start)
    ends <<= ib
    ends |= idx
    ends.sort()
    owner = ends & ((1 << ib) - 1)  # intervals in the order they end (grouped by unit)
    starts = rid * span + 2 * start + 1
    starts <<= ib
    starts |= idx  # sorted already
    active = idx - np.searchsorted(ends, starts)  # the unit's intervals open at each start
    # Slots opened so far (a running max per unit, kept apart by an offset per unit).
    offset = np.repeat(first, np.diff(np.append(first, n))) * (n + 1)
    m = np.maximum.accumulate(active + 1 + offset) - offset
    new = np.empty(n, bool)
    new[0] = True
    np.greater(m[1:], m[:-1], out=new[1:])
    new |= head
    # A reusing start takes the slot of the interval whose end freed it: the unit's (k - m)-th
    # end, k being the start's position in its unit (so index i - m in `owner`).
    ptr = np.where(new, idx, owner[np.maximum(idx - m, 0)]).astype(np.int32 if n < 2**31 else np.int64)
    nxt, moved = np.empty_like(ptr), np.empty(n, bool)
    while True:
        np.take(ptr, ptr, out=nxt)
        if not np.not_equal(nxt, ptr, out=moved).any():
            return (m - 1)[ptr]
        ptr, nxt = nxt, ptr


# --------------------------------------------------------------------------------------------
# Vectorized byte records
# --------------------------------------------------------------------------------------------
def _transposed(rows: list, n: int, dtype=np.uint8) -> np.ndarray:
    """Records from rows (row r = element r of every record): the records, one after another."""
    data = np.empty((len(rows), n), dtype)
    for r, b in enumerate(rows):
        data[r] = b
    return np.ascontiguousarray(data.T).reshape(-1)


class _Records:
    """n protobuf records of one shape, built field by field: row r holds byte r of every record.

    A row's `keep` mask marks records that lack that byte (the unused high bytes of a short varint,
    an absent optional field); tobytes() drops those bytes. `size` is each record's byte count, kept
    up to date so that an enclosing message knows its length.
    """

    def __init__(self, n: int):
        self.n = n
        self.rows: list[tuple[int | np.ndarray, np.ndarray | None]] = []
        self.size: int | np.ndarray = 0

    def _add(self, nbytes, keep) -> None:
        self.size = self.size + (nbytes if keep is None else nbytes * keep)

    def raw(self, data: bytes, keep: np.ndarray | None = None) -> None:
        self.rows.extend((b, keep) for b in data)
        self._add(len(data), keep)

    def varint(self, v: np.ndarray, keep=None) -> None:
        """Base-128 varints of non-negative integers (values where keep is False must be 0)."""
        v = np.asarray(v).astype(np.uint64)
        width = max(1, -(-_bits(v) // 7))
        nbytes = np.ones(self.n, np.int64)
        for j in range(1, width):
            nbytes += v >= np.uint64(1 << (7 * j))
        for j in range(width):
            b = (v >> np.uint64(7 * j)).astype(np.uint8) & np.uint8(0x7F)
            if j < width - 1:
                b |= (nbytes > j + 1).astype(np.uint8) << 7
            self.rows.append((b, keep if j == 0 else _both(nbytes > j, keep)))
        self._add(nbytes, keep)

    def fixed64(self, v: np.ndarray) -> None:
        b = np.ascontiguousarray(np.asarray(v, "<f8")).view(np.uint8).reshape(self.n, 8).T
        self.rows.extend((row, None) for row in b)
        self._add(8, None)

    def message(self, field_tag: bytes, sub: "_Records", keep=None) -> None:
        """A length-delimited field holding `sub`'s record."""
        self.raw(field_tag, keep)
        if isinstance(sub.size, int):
            self.raw(_varint(sub.size), keep)
        else:
            self.varint(sub.size if keep is None else np.where(keep, sub.size, 0), keep)
        self.rows.extend((b, _both(k, keep)) for b, k in sub.rows)
        self._add(sub.size, keep)

    def tobytes(self) -> np.ndarray:
        if all(k is None for _, k in self.rows):
            return _transposed([b for b, _ in self.rows], self.n)
        # Each byte with its drop flag in one uint16 (flag << 8): a single transposition, of
        # elements twice as wide, costs less than transposing the bytes and the mask apart.
        drop = np.uint16(256)
        flat = _transposed([b if k is None else np.where(k, b, b + drop) for b, k in self.rows], self.n, np.uint16)
        return flat[flat < drop].astype(np.uint8)


def _words(data: bytes) -> np.ndarray:
    """Bytes (a multiple of 4 long) as little-endian uint32 words: byte order kept in memory."""
    return np.frombuffer(data, "<u4")


# Four digits a word: 0-9999 zero-padded ("0007"), 10000-19999 space-padded ("   7"), 20000 blank.
_BLANK4 = 20000
_DIGITS4 = _words(b"".join([f"{i:04d}".encode() for i in range(10000)] + [f"{i:4d}".encode() for i in range(10000)])
                  + b"    ")
_FRACTION4 = _words(b"".join(f".{i:03d}".encode() for i in range(1000)))  # ns -> ".ddd" us


class _Text:
    """n fixed-width JSON records, built field by field as rows of 4-byte words (row r holds
    word r of every record), then transposed so each record is contiguous.

    Every variable field fills whole words, with one width per chunk: numbers right-aligned with
    spaces, strings padded with spaces, absent fields all spaces; runs of constant text between
    fields get leading spaces to whole words. All of it is JSON whitespace, so records need no
    bytes squeezed out, and words (not bytes) make the transposition four times shorter.
    """

    def __init__(self, n: int):
        self.n = n
        self.rows: list[int | np.ndarray] = []
        self.text = b""  # constant text not yet in rows

    def raw(self, data: bytes) -> None:
        self.text += data

    def _flush(self) -> None:
        text = b" " * (-len(self.text) % 4) + self.text
        self.rows.extend(int(w) for w in _words(text))
        self.text = b""

    @staticmethod
    def strings(entries: list[bytes]) -> np.ndarray:
        """A table for table(): entry j in column j, padded with spaces to whole words."""
        width = -(-max(len(e) for e in entries) // 4) * 4
        return np.stack([_words(e.ljust(width)) for e in entries], axis=1)

    def table(self, codes: np.ndarray, tab: np.ndarray | list[bytes]) -> None:
        """One of a few strings per record: column codes of tab (see strings())."""
        self._flush()
        self.rows.extend(np.take(tab if isinstance(tab, np.ndarray) else self.strings(tab), codes, axis=1))

    def number(self, v: np.ndarray, show: np.ndarray | None = None) -> None:
        """Non-negative integers, right-aligned; blank where `show` is False."""
        self._flush()
        v = np.asarray(v, np.int64)
        groups, q = [], v
        for j in range(-(-len(str(int(v.max()) if len(v) else 0)) // 4)):
            q, g = np.divmod(q, 10000)
            idx = g + 10000 * (v < 10000 ** (j + 1))  # the number's first group: space-padded
            if j:
                idx[v < 10000**j] = _BLANK4
            if show is not None:
                idx[~show] = _BLANK4
            groups.append(np.take(_DIGITS4, idx))
        self.rows.extend(groups[::-1])

    def micros(self, ns: np.ndarray) -> None:
        """ns as microseconds with three decimals (exact: 1234 ns -> 1.234)."""
        us, frac = np.divmod(ns, 1000)
        self.number(us)
        self.rows.append(np.take(_FRACTION4, frac))

    def tobytes(self) -> np.ndarray:
        self._flush()
        return _transposed(self.rows, self.n, np.uint32).view(np.uint8)


def _both(a, b):
    return a if b is None else (b if a is None else a & b)


def _varint(x: int) -> bytes:
    out = bytearray()
    while True:
        b, x = x & 0x7F, x >> 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _in_order(jobs: Iterable[Callable[[], object]]) -> Iterator[object]:
    """Run jobs on all cores (numpy and zlib release the GIL), yielding results in job order."""
    workers = _workers()
    with ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        for job in jobs:
            pending.append(pool.submit(job))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + CHUNK_SPANS, n)) for lo in range(0, n, CHUNK_SPANS)]


# --------------------------------------------------------------------------------------------
# Perfetto
# --------------------------------------------------------------------------------------------
def _perfetto_fields():
    """Field tags read from the perfetto package's descriptors (not typed in by hand)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    def num(msg, name):
        return msg.DESCRIPTOR.fields_by_name[name].number

    te, tp, da = pb.TrackEvent, pb.TracePacket, pb.DebugAnnotation
    return pb, {
        "packet": _tag(num(pb.Trace, "packet"), 2),
        "timestamp": _tag(num(tp, "timestamp"), 0),
        "track_event": _tag(num(tp, "track_event"), 2),
        "sequence": _tag(num(tp, "trusted_packet_sequence_id"), 0) + _varint(SEQUENCE_ID)
        + _tag(num(tp, "sequence_flags"), 0) + _varint(tp.SEQ_NEEDS_INCREMENTAL_STATE),
        "begin": _tag(num(te, "type"), 0) + _varint(te.TYPE_SLICE_BEGIN),
        "end": _tag(num(te, "type"), 0) + _varint(te.TYPE_SLICE_END),
        "counter": _tag(num(te, "type"), 0) + _varint(te.TYPE_COUNTER),
        "track_uuid": _tag(num(te, "track_uuid"), 0),
        "name_iid": _tag(num(te, "name_iid"), 0),
        "annotation": _tag(num(te, "debug_annotations"), 2),
        "ann_name_iid": _tag(num(da, "name_iid"), 0),
        "ann_int": _tag(num(da, "int_value"), 0),
        "double_counter": _tag(num(te, "double_counter_value"), 1),
    }


def _write_perfetto(f, L: TrackLayout, counters, meta: dict[str, str], label: str) -> None:
    pb, tag = _perfetto_fields()
    td, seq = pb.TrackDescriptor, dict(trusted_packet_sequence_id=SEQUENCE_ID)
    uuids = iter(range(1, 1 << 62))
    launch_uuid = next(uuids)
    counter_uuids = {name: next(uuids) for name in counters}
    sm_uuid = {int(s): next(uuids) for s in np.unique(L.tracks["sm"])}
    track_uuid = np.array([next(uuids) for _ in range(len(L.tracks))], np.int64)

    interned = pb.InternedData(
        event_names=[pb.EventName(iid=i + 1, name=n) for i, n in enumerate(L.tag_names)],
        debug_annotation_names=[pb.DebugAnnotationName(iid=i + 1, name=n) for i, n in enumerate(SPAN_ARGS)],
    )
    cleared = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    packets = [pb.TracePacket(interned_data=interned, sequence_flags=cleared, **seq)]
    # The root track (uuid 0) asks for processes in sibling_order_rank order (SM id) rather than
    # the viewer's own heuristics; viewers that predate the field ignore it.
    packets.append(pb.TracePacket(track_descriptor=td(uuid=0, process_ordering=td.PROCESS_ORDERING_EXPLICIT,
                                                      child_ordering=td.EXPLICIT), **seq))
    packets.append(pb.TracePacket(track_descriptor=td(uuid=launch_uuid, name="launch metadata",
                                                      sibling_order_rank=0), **seq))
    for rank, (name, uuid) in enumerate(counter_uuids.items(), 1):
        packets.append(pb.TracePacket(track_descriptor=td(uuid=uuid, name=name, counter=pb.CounterDescriptor(),
                                                          sibling_order_rank=rank), **seq))
    for rank, (s, uuid) in enumerate(sm_uuid.items()):
        packets.append(pb.TracePacket(track_descriptor=td(
            uuid=uuid, name=f"SM {s}", process=pb.ProcessDescriptor(pid=PID_BASE + s, process_name=f"SM {s}"),
            child_ordering=td.EXPLICIT, sibling_order_rank=rank), **seq))
    for t, uuid in zip(L.tracks.itertuples(index=False), track_uuid):
        packets.append(pb.TracePacket(track_descriptor=td(
            uuid=int(uuid), parent_uuid=sm_uuid[int(t.sm)], name=t.name, sibling_order_rank=int(t.rank),
            sibling_merge_behavior=td.SIBLING_MERGE_BEHAVIOR_NONE), **seq))
    # Launch metadata twice: as the trace's metadata (trace processor's metadata table, keys
    # "cr-<key>"), and as the arguments of one slice spanning the launch, to click on in the UI.
    packets.append(pb.TracePacket(timestamp=0, chrome_events=pb.ChromeEventBundle(
        metadata=[pb.ChromeMetadata(name=k, string_value=v) for k, v in meta.items()]), **seq))
    packets.append(pb.TracePacket(timestamp=0, track_event=pb.TrackEvent(
        type=pb.TrackEvent.TYPE_SLICE_BEGIN, track_uuid=launch_uuid, name=label,
        debug_annotations=[pb.DebugAnnotation(name=k, string_value=v) for k, v in meta.items()]), **seq))
    packets.append(pb.TracePacket(timestamp=L.duration, track_event=pb.TrackEvent(
        type=pb.TrackEvent.TYPE_SLICE_END, track_uuid=launch_uuid), **seq))
    f.write(b"".join(tag["packet"] + _varint(p.ByteSize()) + p.SerializeToString() for p in packets))

    for name, (t, v) in counters.items():
        if len(t):
            f.write(_perfetto_counter(tag, counter_uuids[name], t, v))
    jobs = (lambda lo=lo, hi=hi: _perfetto_spans(tag, L, track_uuid, lo, hi) for lo, hi in _chunks(len(L.order)))
    for chunk in _in_order(jobs):
        f.write(chunk)


def _perfetto_counter(tag, uuid: int, t: np.ndarray, v: np.ndarray) -> np.ndarray:
    ev = _Records(len(t))
    ev.raw(tag["counter"] + tag["track_uuid"] + _varint(uuid) + tag["double_counter"])
    ev.fixed64(v)
    pkt = _Records(len(t))
    pkt.raw(tag["timestamp"])
    pkt.varint(t)
    pkt.message(tag["track_event"], ev)
    pkt.raw(tag["sequence"])
    out = _Records(len(t))
    out.message(tag["packet"], pkt)
    return out.tobytes()


def _perfetto_spans(tag, L: TrackLayout, track_uuid: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """A BEGIN and an END packet per span: slice named by interned tag, arguments tile, kblock, cta."""
    c, n = L.chunk(lo, hi), hi - lo
    args = [(c["tile"], c["tile"] >= 0), (c["kblock"], c["kblock"] >= 0),
            (c["cta"], L.tracks["cta_arg"].to_numpy()[c["track"]])]
    uuid = track_uuid[c["track"]]
    out = _Records(n)
    for kind in ("begin", "end"):
        ev = _Records(n)
        ev.raw(tag[kind] + tag["track_uuid"])
        ev.varint(uuid)
        if kind == "begin":
            ev.raw(tag["name_iid"])
            ev.varint(c["tag"] + 1)
            for iid, (value, has) in enumerate(args, 1):
                if has.any():
                    ann = _Records(n)
                    ann.raw(tag["ann_name_iid"] + _varint(iid) + tag["ann_int"])
                    ann.varint(np.where(has, value, 0))
                    ev.message(tag["annotation"], ann, None if has.all() else has)
        pkt = _Records(n)
        pkt.raw(tag["timestamp"])
        pkt.varint(c[kind if kind == "end" else "start"])
        pkt.message(tag["track_event"], ev)
        pkt.raw(tag["sequence"])
        out.message(tag["packet"], pkt)
    return out.tobytes()


# --------------------------------------------------------------------------------------------
# Chrome Trace Event Format
# --------------------------------------------------------------------------------------------
def _chrome_ids(L: TrackLayout) -> tuple[np.ndarray, np.ndarray, int]:
    """pid per SM track and a tid per track, unique across the trace (viewers key threads by tid)."""
    pid = PID_BASE + L.tracks["sm"].to_numpy()
    tid_base = 10 ** len(str(int(pid.max())))  # above every pid, so no tid is read as a main thread
    return pid, tid_base + 1 + np.arange(len(L.tracks)), tid_base


def _write_chrome(f, L: TrackLayout, counters, meta: dict[str, str], label: str) -> None:
    pid, tid, launch_tid = _chrome_ids(L)

    def meta_event(kind, p, t, **args):
        return {"name": kind, "ph": "M", "ts": 0, "pid": int(p), "tid": int(t), "args": args}

    events = [meta_event("process_name", LAUNCH_PID, launch_tid, name="launch"),
              meta_event("process_sort_index", LAUNCH_PID, launch_tid, sort_index=-1),
              meta_event("thread_name", LAUNCH_PID, launch_tid, name="launch metadata")]
    first = L.tracks.drop_duplicates("sm")
    for rank, (i, s) in enumerate(zip(first.index, first["sm"])):
        events.append(meta_event("process_name", pid[i], tid[i], name=f"SM {s}"))
        events.append(meta_event("process_sort_index", pid[i], tid[i], sort_index=rank))
    for i, (name, rank) in enumerate(zip(L.tracks["name"], L.tracks["rank"])):
        events.append(meta_event("thread_name", pid[i], tid[i], name=name))
        events.append(meta_event("thread_sort_index", pid[i], tid[i], sort_index=int(rank)))
    head = '{"traceEvents":[\n' + "".join(json.dumps(e) + ",\n" for e in events)
    launch = {"name": label, "ph": "X", "ts": 0, "dur": L.duration / 1000, "pid": LAUNCH_PID, "tid": launch_tid,
              "args": meta}
    tail = json.dumps(launch) + '\n],\n"metadata":' + json.dumps(meta) + "}\n"

    track_text = _Text.strings([f',"pid":{p},"tid":{t},"args":{{'.encode() for p, t in zip(pid, tid)])
    names = _Text.strings([json.dumps(n).encode() + b',"ph":"X","ts":' for n in L.tag_names])
    cta_arg = L.tracks["cta_arg"].to_numpy()

    def spans(lo, hi):
        return _chrome_spans(L, names, track_text, cta_arg, lo, hi)

    def counter(name, t, v):
        return lambda: _chrome_counter(name, t, v, launch_tid)

    jobs = [lambda: np.frombuffer(head.encode(), np.uint8)]
    jobs += [counter(name, t, v) for name, (t, v) in counters.items() if len(t)]
    jobs += [lambda lo=lo, hi=hi: spans(lo, hi) for lo, hi in _chunks(len(L.order))]
    _write_gzip(f, jobs, tail.encode())


def _chrome_spans(L: TrackLayout, names, track_text, cta_arg, lo: int, hi: int) -> np.ndarray:
    """One "X" event per span (fixed width per chunk, see _Text)."""
    c, n = L.chunk(lo, hi), hi - lo
    rec = _Text(n)
    rec.raw(b'{"name":')
    rec.table(c["tag"], names)  # the name, then ',"ph":"X","ts":' (sharing one padding)
    rec.micros(c["start"])
    rec.raw(b',"dur":')
    rec.micros(c["end"] - c["start"])
    rec.table(c["track"], track_text)  # ',"pid":..,"tid":..,"args":{'
    args = [(c["tile"], c["tile"] >= 0), (c["kblock"], c["kblock"] >= 0), (c["cta"], cta_arg[c["track"]])]
    before = np.zeros(n, bool)  # an argument already written: the next needs a comma
    for name, (value, has) in zip(SPAN_ARGS, args):
        if not has.any():
            continue
        key = f'"{name}":'.encode()
        # 0: absent (spaces), 1: the first argument, 2: a later one, after a comma
        rec.table(has * (1 + before), [b"", key, b"," + key])
        rec.number(np.where(has, value, 0), None if has.all() else has)
        before |= has
    rec.raw(b"}},\n")
    return rec.tobytes()


def _chrome_counter(name: str, t: np.ndarray, v: np.ndarray, tid: int) -> np.ndarray:
    """One "C" event per counter step, on the launch process."""
    rec = _Text(len(t))
    rec.raw(b'{"name":' + json.dumps(name).encode() + b',"ph":"C","ts":')
    rec.micros(t)
    rec.raw(f',"pid":{LAUNCH_PID},"tid":{tid},"args":{{"value":'.encode())
    if np.all(v == np.round(v)) and np.all(v >= 0) and np.all(v < 2**62):
        rec.number(v.astype(np.int64))
    else:  # fractional or negative values: formatted one by one (counters are short)
        rec.table(np.arange(len(v)), [json.dumps(float(x)).encode() for x in v])
    rec.raw(b"}},\n")
    return rec.tobytes()


def _write_gzip(f, jobs: list[Callable[[], np.ndarray]], tail: bytes) -> None:
    """One gzip member from text chunks deflated in parallel (as pigz does): each chunk is raw
    deflate ending in a sync flush, so the chunks concatenate into one valid deflate stream."""

    def deflated(job):
        def run():
            text = job()
            z = _deflate.compressobj(GZIP_LEVEL, _deflate.DEFLATED, -15)
            return text, z.compress(text) + z.flush(_deflate.Z_SYNC_FLUSH)
        return run

    f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # gzip header: deflate, no name, mtime 0
    crc, size = 0, 0
    for text, packed in _in_order(deflated(j) for j in jobs):
        crc, size = _deflate.crc32(text, crc), size + len(text)
        f.write(packed)
    z = _deflate.compressobj(GZIP_LEVEL, _deflate.DEFLATED, -15)
    f.write(z.compress(tail) + z.flush(_deflate.Z_FINISH))
    crc, size = _deflate.crc32(tail, crc), size + len(tail)
    f.write(struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF))
