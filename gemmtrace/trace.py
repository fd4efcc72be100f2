"""The trace model: the profiler's raw buffer, decoded into a table of spans plus launch metadata.

Buffer layout (written by gemmtrace/include/gemmtrace/profiler.cuh; keep the two in step):
  the buffer is `num_regions` regions, one per recording warp, each
    HEADER_WORDS uint32 header, then `capacity` records of RECORD_WORDS uint32.
  header: [base_ns lo, hi, MAGIC, smid, cta, warp | role << 16, count, capacity,
           base cycles lo, hi, end cycles lo, hi, end ns lo, hi, flags, 0]
          the fixed fields written at init, the end pair, flags, count and MAGIC when the warp
          finishes; `count` is how many records it tried to write, so count - capacity (when
          positive) records were dropped because the region was full.
  record: [start, end, tile, tag | kblock << 8], start and end in SM cycles: with the flag
          RAW_CLOCKS, the low word of %clock64 as read (their offset from the base cycles is taken
          here, modulo 2^32); without it (buffers of earlier builds), that offset itself.
  Cycles become ns through the warp's own (cycles, ns) pair measured from init to finish, so every
  span lands on %globaltimer's clock, which all SMs share.

A saved run is a folder: spans.npz (columns) and meta.json (launch metadata). It loads with numpy
and pandas alone, on a machine with no GPU.
"""
from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import tags as tagdefs
from .paths import GemmtraceError

HEADER_WORDS = 16
RECORD_WORDS = 4
MAGIC = 0x47545231  # "GTR1"
NO_TILE = 0xFFFFFFFF
NO_KBLOCK = 0xFFFFFF
MAX_TAG_ID = tagdefs.MAX_TAG_ID
FORMAT_VERSION = 1
FLAGS_WORD = 14
RAW_CLOCKS = 0x1  # header flag: record times are %clock64's low words (profiler.cuh: kRawClocks)

SPAN_COLUMNS = ("sm", "cta", "warp", "region", "role", "tag", "tile", "kblock", "start_ns", "end_ns")
REGION_COLUMNS = ("sm", "cta", "warp", "role", "count", "dropped", "complete")


@dataclass(frozen=True)
class BufferLayout:
    """How the host sized the profiler buffer for one launch."""

    num_regions: int
    capacity: int  # records per region

    def __post_init__(self) -> None:
        if self.num_regions < 0 or self.capacity < 0:
            raise GemmtraceError(f"profiler buffer layout must be non-negative, got {self}.")

    @property
    def words_per_region(self) -> int:
        return HEADER_WORDS + self.capacity * RECORD_WORDS

    @property
    def total_words(self) -> int:
        return self.num_regions * self.words_per_region

    @property
    def nbytes(self) -> int:
        return self.total_words * 4


def spans_frame(
    *,
    sm,
    role,
    tag,
    tile,
    start_ns,
    end_ns,
    cta=None,
    warp=None,
    region=None,
    kblock=None,
    role_names: list[str] | None = None,
    tag_names: list[str] | None = None,
) -> pd.DataFrame:
    """Build a spans table with the canonical column types.

    `role` and `tag` may be names (strings) or ids (ints, indexes into `role_names` / `tag_names`,
    which default to gemmtrace's own vocabulary, tags.h). Missing columns default to 0 (cta, warp),
    one region per (sm, role) pair, and -1 (kblock). Times are int64 ns.
    """
    n = len(start_ns)
    sm = np.asarray(sm, dtype=np.int32)

    def cat(values, names: list[str], what: str) -> pd.Categorical:
        values = np.asarray(values)
        if values.dtype.kind in "iu":
            bad = (values < 0) | (values >= len(names))
            if bad.any():
                raise GemmtraceError(f"unknown {what} id {int(values[bad][0])} in spans.")
            return pd.Categorical.from_codes(values.astype(np.int64), categories=names)
        out = pd.Categorical(values, categories=names)
        if out.isna().any():
            raise GemmtraceError(f"unknown {what} name {values[np.asarray(out.isna())][0]!r} in spans.")
        return out

    role_c = cat(role, role_names or tagdefs.role_names(), "role")
    if region is None:
        region = np.unique(np.stack([sm, role_c.codes.astype(np.int32)]), axis=1, return_inverse=True)[1]
    df = pd.DataFrame(
        {
            "sm": sm,
            "cta": np.zeros(n, np.int32) if cta is None else np.asarray(cta, np.int32),
            "warp": np.zeros(n, np.int32) if warp is None else np.asarray(warp, np.int32),
            "region": np.asarray(region, np.int32).reshape(n),
            "role": role_c,
            "tag": cat(tag, tag_names or tagdefs.tag_names(), "tag"),
            "tile": np.asarray(tile, np.int64).astype(np.int32),
            "kblock": np.full(n, -1, np.int32) if kblock is None else np.asarray(kblock, np.int32),
            "start_ns": np.asarray(start_ns, np.int64),
            "end_ns": np.asarray(end_ns, np.int64),
        }
    )
    return df


@dataclass
class Decoded:
    spans: pd.DataFrame
    regions: pd.DataFrame
    t0_ns: int  # absolute %globaltimer of the earliest span start
    tags: "tagdefs.Tags | None" = None  # the vocabulary it was decoded with

    @property
    def dropped(self) -> int:
        return int(self.regions["dropped"].sum())

    @property
    def incomplete_regions(self) -> int:
        return int((~self.regions["complete"]).sum())

    @property
    def needed_capacity(self) -> int:
        """Records per region that would have held every span (the busiest warp's count)."""
        return int(self.regions["count"].max()) if len(self.regions) else 0

    def unfinished(self, most: int = 4) -> list[str]:
        """Regions a warp started (init wrote its header) but never finished, named; the staged
        recorder writes its header only at finish, so its unfinished regions look unused."""
        r = self.regions
        if "started" not in r:
            return []
        bad = r[r["started"] & ~r["complete"]]
        names = self.tags.role_names() if self.tags else tagdefs.role_names()
        return [f"SM {int(x.sm)} CTA {int(x.cta)} warp {int(x.warp)}"
                f" ({names[int(x.role)] if int(x.role) < len(names) else 'role ' + str(int(x.role))})"
                for x in bad.head(most).itertuples()]

    def profiler_meta(self, layout: "BufferLayout", regions_per_cta: int) -> dict:
        """meta.json's "profiler" entry for this buffer."""
        return {
            "num_regions": layout.num_regions,
            "capacity": layout.capacity,
            "regions_per_cta": int(regions_per_cta),
            "records": int(len(self.spans)),
            "dropped": self.dropped,
            "needed_capacity": self.needed_capacity,
            "incomplete_regions": self.incomplete_regions,
            "unfinished_regions": self.unfinished(),
            "t0_globaltimer_ns": self.t0_ns,
            "timer": "SM cycles (%clock64) per span, mapped per warp onto %globaltimer ns (init and finish pairs)",
        }


def trust_warnings(label: str, profiler: dict) -> list[str]:
    """The sentences every capture prints about what a trace lacks (dropped records, warps that never
    finished): one wording for `gemmtrace run`, gemmtrace.capture and `gemmtrace import`."""
    out = []
    dropped = int(profiler.get("dropped") or 0)
    if dropped:
        cap, need = profiler.get("capacity"), profiler.get("needed_capacity")
        hint = f" (capacity {cap} records per warp; the busiest warp needed {need})" if cap and need else ""
        out.append(f"{label}: {dropped} profiler records were dropped because the buffer was full{hint}; "
                   f"the trace misses them, so give the buffer a capacity of at least {need or 'more'} records per warp.")
    inc = int(profiler.get("incomplete_regions") or 0)
    if inc:
        named = profiler.get("unfinished_regions") or []
        which = f", among them {', '.join(named)}" if named else ""
        out.append(f"{label}: {inc} of {profiler.get('num_regions', '?')} profiler regions were never finished{which}: "
                   f"their warps did not call finish() (or fewer warps record than regions_per_cta says), so their "
                   f"spans are missing.")
    return out


def decode(buffer: np.ndarray, layout: BufferLayout, tags: "tagdefs.Tags | str | Path | None" = None) -> Decoded:
    """Decode a raw profiler buffer (uint32 words) into spans, with no Python loop over records.

    `tags` is the kernel's vocabulary (a gemmtrace.Tags or its header; default gemmtrace's own):
    a record whose tag, or a region whose role, it does not declare is an error, not a guess."""
    vocab = tagdefs.resolve(tags)
    role_names, tag_names = vocab.role_names(), vocab.tag_names()
    words = np.asarray(buffer).view(np.uint32).reshape(-1)
    if words.size != layout.total_words:
        raise GemmtraceError(
            f"profiler buffer has {words.size} words but the layout {layout} needs {layout.total_words}."
        )
    if layout.num_regions == 0:
        return Decoded(spans_frame(sm=[], role=[], tag=[], tile=[], start_ns=[], end_ns=[],
                                   role_names=role_names, tag_names=tag_names),
                       pd.DataFrame({c: [] for c in REGION_COLUMNS}), 0)
    per = words.reshape(layout.num_regions, layout.words_per_region)
    head = per[:, :HEADER_WORDS]
    complete = head[:, 2] == MAGIC
    base = head[:, 0].astype(np.int64) | (head[:, 1].astype(np.int64) << 32)
    started = complete | (base != 0)  # the direct recorder writes the header (not the magic) at init
    count = np.where(complete, head[:, 6], 0).astype(np.int64)
    cap_seen = head[:, 7].astype(np.int64)
    if np.any(complete & (cap_seen != layout.capacity)):
        raise GemmtraceError("profiler buffer headers disagree with the host's capacity: the buffer is corrupt.")
    unknown_flags = complete & ((head[:, FLAGS_WORD] & ~np.uint32(RAW_CLOCKS)) != 0)
    if np.any(unknown_flags):
        i = int(np.argmax(unknown_flags))
        raise GemmtraceError(
            f"the profiler header of SM {int(head[i, 3])} warp {int(head[i, 5] & 0xFFFF)} has flags {int(head[i, FLAGS_WORD]):#x}, "
            f"which this gemmtrace does not know: the buffer is corrupt, or was written by a newer profiler.cuh.")
    stored = np.minimum(count, layout.capacity)
    dropped = count - stored
    regions = pd.DataFrame(
        {
            "sm": head[:, 3].astype(np.int32),
            "cta": head[:, 4].astype(np.int32),
            "warp": (head[:, 5] & 0xFFFF).astype(np.int32),
            "role": (head[:, 5] >> 16).astype(np.int32),
            "count": count,
            "dropped": dropped,
            "complete": complete,
            "started": started,
        }
    )
    recs = per[:, HEADER_WORDS:].reshape(layout.num_regions, layout.capacity, RECORD_WORDS)
    keep = np.arange(layout.capacity)[None, :] < stored[:, None]
    region_idx = np.broadcast_to(np.arange(layout.num_regions)[:, None], keep.shape)[keep]
    r = recs[keep]
    def u64(lo: int) -> np.ndarray:
        return head[:, lo].astype(np.int64) | (head[:, lo + 1].astype(np.int64) << 32)

    clk_span = u64(10) - u64(8)
    ns_span = u64(12) - base
    ns_per_cycle = (ns_span / np.maximum(clk_span, 1))[region_idx]
    # Cycle offsets from the warp's base: raw clock words less the base's low word, modulo 2^32
    # (uint32 arithmetic wraps), or the offsets as stored.
    raw = (head[:, FLAGS_WORD] & RAW_CLOCKS).astype(bool)[region_idx]
    origin = np.where(raw, head[:, 8][region_idx], 0).astype(np.uint32)
    start_off = (r[:, 0].astype(np.uint32) - origin).astype(np.int64)
    end_off = (r[:, 1].astype(np.uint32) - origin).astype(np.int64)
    start_abs = base[region_idx] + np.rint(start_off * ns_per_cycle).astype(np.int64)
    end_abs = base[region_idx] + np.rint(end_off * ns_per_cycle).astype(np.int64)
    t0 = int(start_abs.min()) if start_abs.size else 0
    tile = r[:, 2]
    kblock = (r[:, 3] >> 8).astype(np.int64)
    tag_ids = (r[:, 3] & 0xFF).astype(np.int64)
    known_tag = np.zeros(MAX_TAG_ID + 1, bool)
    known_tag[sorted(vocab.declared_tag_ids())] = True
    bad = ~known_tag[tag_ids]
    if bad.any():
        i = int(np.argmax(bad))
        reg = regions.iloc[int(region_idx[i])]
        raise GemmtraceError(
            f"a record of SM {reg['sm']} warp {reg['warp']} has an unknown tag id {int(tag_ids[i])} (the vocabulary of "
            f"{vocab.source} does not declare it): decode with the kernel's own tag header, or the buffer is corrupt.")
    role_ids = regions["role"].to_numpy()[region_idx]
    bad = ~np.isin(role_ids, sorted(vocab.declared_role_ids()))
    if bad.any():
        i = int(np.argmax(bad))
        raise GemmtraceError(
            f"a region of SM {int(regions['sm'].to_numpy()[region_idx[i]])} has an unknown role id {int(role_ids[i])} (the "
            f"vocabulary of {vocab.source} does not declare it): decode with the kernel's own tag header, or the buffer is corrupt.")
    spans = spans_frame(
        sm=regions["sm"].to_numpy()[region_idx],
        cta=regions["cta"].to_numpy()[region_idx],
        warp=regions["warp"].to_numpy()[region_idx],
        region=region_idx,
        role=role_ids,
        tag=tag_ids,
        tile=np.where(tile == NO_TILE, -1, tile.astype(np.int64)),
        kblock=np.where(kblock == NO_KBLOCK, -1, kblock),
        start_ns=start_abs - t0,
        end_ns=end_abs - t0,
        role_names=role_names,
        tag_names=tag_names,
    )
    return Decoded(spans, regions, t0, vocab)


@dataclass
class Run:
    """A saved launch: its spans and its metadata (see docs/trace-format.md for the keys)."""

    spans: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    regions: pd.DataFrame | None = None
    path: Path | None = None

    # -- convenience views -------------------------------------------------------------------
    @property
    def kernel(self) -> str:
        return str(self.meta.get("kernel", "?"))

    @property
    def sm_count(self) -> int:
        """P: the device's SM count (falls back to the SMs that recorded, for synthetic runs)."""
        device = self.meta.get("device")
        p = device.get("sm_count") if isinstance(device, dict) else None
        try:
            return int(p) if p else int(self.spans["sm"].nunique())
        except (TypeError, ValueError):
            raise GemmtraceError(f"the run's device.sm_count is {p!r}, not a number.") from None

    @property
    def label(self) -> str:
        m = self.meta
        shape = m.get("shape")
        s = "x".join(str(shape.get(k, "?")) for k in "MNK") if isinstance(shape, dict) and shape else "?"
        sched = m.get("scheduler")
        return f"{self.kernel} {s}" + (f" {sched}" if sched else "")

    @property
    def tag_groups(self) -> dict[str, str]:
        """Each tag's group (mma, wait, issue, epilogue, schedule, setup, other): what the analysis
        reads. Stored in meta.json; runs saved before that used gemmtrace's own tags.h."""
        vocab = tagdefs.Tags.from_meta(self.meta)
        return vocab.groups if vocab is not None else tagdefs.tag_groups()

    @property
    def vocabulary(self) -> "tagdefs.Tags":
        """The roles and tags the run was recorded with (gemmtrace's own for runs saved without one)."""
        return tagdefs.Tags.from_meta(self.meta) or tagdefs.builtin()

    def metrics(self):
        from .analysis import compute_metrics

        return compute_metrics(self)

    # -- persistence ------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        cols = {c: self.spans[c].to_numpy() for c in SPAN_COLUMNS if c not in ("role", "tag")}
        cols["role"] = self.spans["role"].cat.codes.to_numpy().astype(np.int8)
        cols["tag"] = self.spans["tag"].cat.codes.to_numpy().astype(np.int8)
        if self.regions is not None:
            for c in REGION_COLUMNS:
                cols[f"regions_{c}"] = self.regions[c].to_numpy()
        np.savez(folder / "spans.npz", **cols)
        meta = dict(self.meta)
        meta["format_version"] = FORMAT_VERSION
        meta["roles"] = list(self.spans["role"].cat.categories)
        meta["tags"] = list(self.spans["tag"].cat.categories)
        meta.setdefault("vocabulary", tagdefs.builtin().to_meta())
        meta["span_count"] = int(len(self.spans))
        (folder / "meta.json").write_text(json.dumps(meta, indent=2, default=_json_default) + "\n")
        self.path = folder
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "Run":
        folder = Path(folder)
        if not folder.is_dir():
            raise GemmtraceError(f"{folder} is not a run folder (no such directory).")
        meta_path, spans_path = folder / "meta.json", folder / "spans.npz"
        for p in (meta_path, spans_path):
            if not p.is_file():
                raise GemmtraceError(f"{folder} is not a complete run folder: {p.name} is missing.")
        try:
            meta = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise GemmtraceError(f"{meta_path} is not valid JSON ({e.msg if hasattr(e, 'msg') else e}).") from None
        if not isinstance(meta, dict):
            raise GemmtraceError(f"{meta_path} does not hold a JSON object.")
        if meta.get("format_version") != FORMAT_VERSION:
            raise GemmtraceError(
                f"{meta_path} has format_version {meta.get('format_version')!r}; this gemmtrace reads {FORMAT_VERSION}."
            )
        try:
            with np.load(spans_path, allow_pickle=False) as z:
                cols = {k: z[k] for k in z.files}
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise GemmtraceError(f"{spans_path} is corrupt or truncated ({type(e).__name__}).") from None
        missing = [c for c in SPAN_COLUMNS if c not in cols]
        if missing:
            raise GemmtraceError(f"{spans_path} lacks the column(s) {', '.join(missing)}.")
        lengths = {len(cols[c]) for c in SPAN_COLUMNS}
        if len(lengths) != 1:
            raise GemmtraceError(f"{spans_path} has columns of different lengths: the file is corrupt.")
        if meta.get("span_count") not in (None, len(cols["start_ns"])):
            raise GemmtraceError(
                f"{folder} is incomplete: meta.json says {meta['span_count']} spans, spans.npz holds {len(cols['start_ns'])}."
            )
        roles, tags_ = meta.get("roles"), meta.get("tags")
        if not isinstance(roles, list) or not isinstance(tags_, list):
            raise GemmtraceError(f"{meta_path} lacks the role and tag name lists.")
        role = cols["role"].astype(np.int64)
        tag = cols["tag"].astype(np.int64)
        if role.size and (role.min() < 0 or role.max() >= len(roles)) or tag.size and (tag.min() < 0 or tag.max() >= len(tags_)):
            raise GemmtraceError(f"{spans_path} has role or tag codes outside meta.json's lists: the run is corrupt.")
        # Map saved names onto this version's categories (names are the stable identity).
        spans = spans_frame(
            sm=cols["sm"], cta=cols["cta"], warp=cols["warp"], region=cols["region"],
            role=np.asarray(roles, dtype=object)[role] if role.size else np.array([], dtype=object),
            tag=np.asarray(tags_, dtype=object)[tag] if tag.size else np.array([], dtype=object),
            tile=cols["tile"], kblock=cols["kblock"], start_ns=cols["start_ns"], end_ns=cols["end_ns"],
            role_names=[str(r) for r in roles], tag_names=[str(t) for t in tags_],
        )
        regions = None
        if all(f"regions_{c}" in cols for c in REGION_COLUMNS):
            regions = pd.DataFrame({c: cols[f"regions_{c}"] for c in REGION_COLUMNS})
        return cls(spans=spans, meta=meta, regions=regions, path=folder)


def load(path: str | Path) -> Run:
    """Load a saved run folder (see Run.save)."""
    return Run.load(path)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot store {type(o).__name__} in meta.json")
