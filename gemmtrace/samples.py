"""Sample runs bundled with gemmtrace (recorded on an H100), so reports and analyses work anywhere.

Each sample is a run folder (spans.npz + meta.json) under gemmtrace/samples/, named for what it
holds, e.g. v8-static and v8-dynamic: the same kernel and shape under each scheduler.
$GEMMTRACE_SAMPLES names another folder of samples (tests use it).
"""
from __future__ import annotations

import os
from pathlib import Path

from .paths import GemmtraceError
from .trace import Run, load

BUNDLED_DIR = Path(__file__).resolve().parent / "samples"


def samples_dir() -> Path:
    """Where the samples are: $GEMMTRACE_SAMPLES, else the folder bundled with the package."""
    env = os.environ.get("GEMMTRACE_SAMPLES")
    return Path(env) if env else BUNDLED_DIR


def sample_names() -> list[str]:
    """The bundled samples, static before dynamic for the same kernel (so comparisons read
    "static vs dynamic"); empty when none are bundled."""
    folder = samples_dir()
    if not folder.is_dir():
        return []
    names = [p.name for p in folder.iterdir() if p.is_dir() and (p / "meta.json").is_file()]
    return sorted(names, key=lambda n: (n.replace("static", "").replace("dynamic", ""), "dynamic" in n, n))


def sample_path(name: str) -> Path:
    names = sample_names()
    if not names:
        raise GemmtraceError(f"no sample runs are bundled with this gemmtrace ({samples_dir()} holds none).")
    if name not in names:
        raise GemmtraceError(f"there is no bundled sample {name!r}; the bundled samples are {', '.join(names)}.")
    return samples_dir() / name


def load_sample(name: str) -> Run:
    """Load one bundled sample run by name (see sample_names())."""
    return load(sample_path(name))


def load_samples(names: list[str] | None = None) -> list[Run]:
    """Load the named bundled samples, or all of them; one sentence when none are bundled."""
    if not names:
        names = sample_names()
        if not names:
            raise GemmtraceError(f"no sample runs are bundled with this gemmtrace ({samples_dir()} holds none).")
    return [load_sample(n) for n in names]


def scheduler_pair() -> list[str]:
    """The bundled static/dynamic pair of one kernel and shape (what `explain --sample` explains by
    default), or the first sample when there is no such pair; empty when none are bundled."""
    names = sample_names()
    for n in names:
        if n.endswith("-static") and n[: -len("static")] + "dynamic" in names:
            return [n, n[: -len("static")] + "dynamic"]
    return names[:1]
