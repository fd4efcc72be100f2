"""Roles and span tags, read from gemmtrace/include/gemmtrace/tags.h (the single place they are declared)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .paths import TAGS_HEADER, GemmtraceError

_ROLE_RE = re.compile(r"X\(\s*(\w+)\s*,\s*(\d+)\s*,\s*\"([\w]+)\"\s*\)")
_TAG_RE = re.compile(r"X\(\s*(\w+)\s*,\s*(\d+)\s*,\s*\"([\w]+)\"\s*,\s*\"([\w]+)\"\s*\)")


@dataclass(frozen=True)
class Tag:
    enum: str
    id: int
    name: str
    group: str


@dataclass(frozen=True)
class Role:
    enum: str
    id: int
    name: str


def _block(text: str, macro: str) -> str:
    start = text.find(f"#define {macro}(X)")
    if start < 0:
        raise GemmtraceError(f"{TAGS_HEADER} has no {macro}(X) list.")
    lines = []
    for line in text[start:].splitlines():
        lines.append(line)
        if not line.rstrip().endswith("\\"):
            break
    return "\n".join(lines)


@lru_cache(maxsize=1)
def _parse() -> tuple[tuple[Role, ...], tuple[Tag, ...]]:
    text = TAGS_HEADER.read_text()
    roles = tuple(Role(e, int(i), n) for e, i, n in _ROLE_RE.findall(_block(text, "GEMMTRACE_ROLES")))
    tags = tuple(Tag(e, int(i), n, g) for e, i, n, g in _TAG_RE.findall(_block(text, "GEMMTRACE_TAGS")))
    if not roles or not tags:
        raise GemmtraceError(f"could not read the role and tag lists from {TAGS_HEADER}.")
    return roles, tags


def roles() -> tuple[Role, ...]:
    return _parse()[0]


def tags() -> tuple[Tag, ...]:
    return _parse()[1]


def role_names() -> list[str]:
    """Role names indexed by role id (ids are dense from 0)."""
    out = [""] * (max(r.id for r in roles()) + 1)
    for r in roles():
        out[r.id] = r.name
    return out


def tag_names() -> list[str]:
    """Tag names indexed by tag id; id 0 is 'none' (never recorded)."""
    out = ["none"] * (max(t.id for t in tags()) + 1)
    for t in tags():
        out[t.id] = t.name
    return out


def tag_groups() -> dict[str, str]:
    return {t.name: t.group for t in tags()}
