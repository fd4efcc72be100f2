"""Where the CUDA sources live: inside the package (gemmtrace/include and gemmtrace/kernels), so a
wheel, a regular install and an editable install all find them the same way."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE_DIR / "include"
KERNELS_DIR = PACKAGE_DIR / "kernels"
TAGS_HEADER = INCLUDE_DIR / "gemmtrace" / "tags.h"
# The checkout the package sits in, where there is one (git metadata, bench/results); None in a wheel.
ROOT = PACKAGE_DIR.parent if (PACKAGE_DIR.parent / "pyproject.toml").is_file() else None


class GemmtraceError(Exception):
    """An error with a one-sentence message meant for the user (the CLI prints it, no traceback)."""
