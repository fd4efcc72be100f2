"""`gemmtrace import`: a raw profiler buffer saved by a C++ program (capture_host.h) into a run folder.

The raw format (docs/own-kernel.md): PREFIX.bin holds the buffer's uint32 words as the device wrote
them (little-endian); PREFIX.json holds
    format "gemmtrace-raw", version 1, buffer (the .bin's file name, next to the JSON),
    num_regions, capacity, regions_per_cta, [grid_ctas], name, [shape [M, N, K]], [flops],
    [tags_header: a header path, relative to the JSON, or null for gemmtrace's own tags],
    device {name, sm_count, ...}, [timings {...}] (the keys of a run's meta.json).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path

import numpy as np

from .paths import GemmtraceError
from .tags import resolve
from .trace import BufferLayout, Run, decode, trust_warnings

RAW_FORMAT = "gemmtrace-raw"
RAW_VERSION = 1


def _field(raw: dict, key: str, kind, where: str, required: bool = True):
    v = raw.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, kind) or isinstance(v, bool):
        raise GemmtraceError(f"{where}: '{key}' must be {'an integer' if kind is int else 'a ' + kind.__name__}, got {v!r}.")
    return v


def import_raw(path: str | Path) -> tuple[Run, list[str]]:
    """Decode PREFIX.json + PREFIX.bin (path: the JSON, or the prefix) into a Run; also returns the
    trust warnings (dropped records, unfinished regions) in the words `gemmtrace run` uses."""
    path = Path(path)
    if path.suffix == ".bin":
        path = path.with_suffix(".json")
    elif path.suffix != ".json" and not path.is_file():  # the prefix the program saved under
        path = path.with_name(path.name + ".json")
    if not path.is_file():
        raise GemmtraceError(f"{path} does not exist: give the .json file a C++ program wrote with gemmtrace::HostCapture::save.")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GemmtraceError(f"{path} is not valid JSON ({getattr(e, 'msg', e)}).") from None
    if not isinstance(raw, dict) or raw.get("format") != RAW_FORMAT:
        raise GemmtraceError(f"{path} is not a gemmtrace raw capture (its 'format' is not {RAW_FORMAT!r}).")
    if raw.get("version") != RAW_VERSION:
        raise GemmtraceError(f"{path} has raw format version {raw.get('version')!r}; this gemmtrace reads {RAW_VERSION}.")
    where = str(path)
    num_regions = _field(raw, "num_regions", int, where)
    capacity = _field(raw, "capacity", int, where)
    regions_per_cta = _field(raw, "regions_per_cta", int, where)
    name = _field(raw, "name", str, where)
    if regions_per_cta < 1 or num_regions % regions_per_cta:
        raise GemmtraceError(f"{where}: num_regions ({num_regions}) is not a multiple of regions_per_cta ({regions_per_cta}).")
    layout = BufferLayout(num_regions, capacity)
    bin_path = path.parent / _field(raw, "buffer", str, where)
    if not bin_path.is_file():
        raise GemmtraceError(f"{where} names the buffer {bin_path.name}, which is not next to it.")
    size = bin_path.stat().st_size
    if size != layout.nbytes:
        raise GemmtraceError(f"{bin_path} holds {size} bytes, but {num_regions} regions of {capacity} records need "
                             f"{layout.nbytes}: the file is truncated or the JSON describes another buffer.")
    words = np.fromfile(bin_path, dtype="<u4")
    header = raw.get("tags_header")
    if header is not None:
        header = Path(header) if Path(header).is_absolute() else path.parent / header
    vocab = resolve(header)
    decoded = decode(words, layout, vocab)

    meta: dict = {"kernel": name, "source": "import", "imported_from": path.name}
    shape = raw.get("shape")
    if shape is not None:
        if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(x, int) and x > 0 for x in shape)):
            raise GemmtraceError(f"{where}: 'shape' must be [M, N, K] with positive integers, got {shape!r}.")
        meta["shape"] = dict(zip("MNK", shape))
    flops = raw.get("flops", 2.0 * math.prod(shape) if shape else None)
    if flops is not None:
        meta["flops"] = float(flops)
    device = raw.get("device")
    if not isinstance(device, dict) or not isinstance(device.get("sm_count"), int):
        raise GemmtraceError(f"{where}: 'device' must hold the GPU's sm_count (the metrics divide by it).")
    meta["device"] = device
    meta["launch"] = {"grid_ctas": int(raw.get("grid_ctas") or num_regions // regions_per_cta)}
    meta["timings"] = raw.get("timings") if isinstance(raw.get("timings"), dict) else {}
    meta["profiler"] = decoded.profiler_meta(layout, regions_per_cta)
    meta["vocabulary"] = vocab.to_meta()
    meta["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return Run(decoded.spans, meta, decoded.regions), trust_warnings(name, meta["profiler"])
