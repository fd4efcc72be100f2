"""Where the CUDA sources live: the repository's include/ and kernels/ folders."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE_DIR = ROOT / "include"
KERNELS_DIR = ROOT / "kernels"
TAGS_HEADER = INCLUDE_DIR / "gemmtrace" / "tags.h"


class GemmtraceError(Exception):
    """An error with a one-sentence message meant for the user (the CLI prints it, no traceback)."""
