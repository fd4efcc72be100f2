"""A kernel's vocabulary: its warp roles and span tags, each tag with the group the analysis reads.

gemmtrace's own kernels declare theirs in gemmtrace/include/gemmtrace/tags.h; a user's kernel may
declare its own in a header of the same X-macro form, which both the device code
(GEMMTRACE_DEFINE_VOCABULARY in profiler.cuh) and Python (`Tags.from_header`) read:

    #define MY_GEMM_ROLES(X)          \\
      X(PRODUCER, 0, "producer")      \\
      X(MATH, 1, "math")
    #define MY_GEMM_TAGS(X)                  \\
      X(LOAD, 1, "load", "issue")            \\
      X(MMA, 2, "mma", "mma")

A header holds one list whose macro name ends in ROLES and one whose name ends in TAGS (a header
with tags only takes gemmtrace's roles). Runs store names and groups in meta.json, so analysis,
export and reports work for any vocabulary.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .paths import TAGS_HEADER, GemmtraceError

# What a tag's span means to the analysis (docs/metrics.md): MMA spans keep the tensor cores busy;
# the others explain tensor-core gaps (wait, schedule, epilogue, issue, setup) or are just shown.
GROUPS = ("mma", "wait", "issue", "epilogue", "schedule", "setup", "other")
MAX_TAG_ID = 255  # 8 bits of each record
MAX_ROLE_ID = 0xFFFF  # 16 bits of each region header

_DEFINE_RE = re.compile(r"^\s*#\s*define\s+(\w*?(ROLES|TAGS))\s*\(\s*X\s*\)\s*\\?\s*$")
_ROLE_RE = re.compile(r"^\s*X\(\s*(\w+)\s*,\s*(\d+)\s*,\s*\"([\w.\-]+)\"\s*\)\s*\\?\s*$")
_TAG_RE = re.compile(r"^\s*X\(\s*(\w+)\s*,\s*(\d+)\s*,\s*\"([\w.\-]+)\"\s*,\s*\"(\w+)\"\s*\)\s*\\?\s*$")


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


@dataclass(frozen=True)
class Tags:
    """Roles and tags of one kernel (ids as the device records them)."""

    roles: tuple[Role, ...]
    tags: tuple[Tag, ...]
    source: str = "gemmtrace"  # where they were declared, for messages and meta.json

    def __post_init__(self) -> None:
        where = f"the vocabulary of {self.source}"
        if not self.roles or not self.tags:
            raise GemmtraceError(f"{where} needs at least one role and one tag.")
        for kind, items, lo, hi in (("role", self.roles, 0, MAX_ROLE_ID), ("tag", self.tags, 1, MAX_TAG_ID)):
            for it in items:
                if not lo <= it.id <= hi:
                    raise GemmtraceError(f"{where}: {kind} {it.name!r} has id {it.id}; {kind} ids run from {lo} to {hi}.")
            for attr in ("id", "name", "enum"):
                seen: dict = {}
                for it in items:
                    v = getattr(it, attr)
                    if v in seen:
                        raise GemmtraceError(f"{where}: two {kind}s share the {attr} {v!r}.")
                    seen[v] = it
        for t in self.tags:
            if t.group not in GROUPS:
                raise GemmtraceError(f"{where}: tag {t.name!r} has group {t.group!r}; groups are {', '.join(GROUPS)}.")
        if "none" in {t.name for t in self.tags}:
            raise GemmtraceError(f"{where}: 'none' is reserved (tag id 0, never recorded).")

    # -- reading -------------------------------------------------------------------------------
    @classmethod
    def from_header(cls, path: str | Path) -> "Tags":
        """Parse a header of the tags.h form; a line that does not parse is named with its number."""
        path = Path(path)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise GemmtraceError(f"cannot read the tag header {path} ({getattr(e, 'strerror', None) or e}).") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "<header>") -> "Tags":
        lists: dict[str, tuple[str, list]] = {}
        lines = text.splitlines()
        i = 0
        while i < len(lines):
            m = _DEFINE_RE.match(lines[i])
            if not m:
                i += 1
                continue
            macro, kind = m.group(1), m.group(2)
            if kind in lists:
                raise GemmtraceError(f"{source}:{i + 1}: a second {kind} list ({macro}); a header declares one of each.")
            entries, cont = [], lines[i].rstrip().endswith("\\")
            i += 1
            while cont and i < len(lines):
                line = lines[i]
                cont = line.rstrip().endswith("\\")
                body = line.rstrip().rstrip("\\").strip()
                if body:
                    rx = _ROLE_RE if kind == "ROLES" else _TAG_RE
                    e = rx.match(line)
                    if not e:
                        form = 'X(NAME, id, "name")' if kind == "ROLES" else 'X(NAME, id, "name", "group")'
                        raise GemmtraceError(f"{source}:{i + 1}: cannot read {body!r} in {macro}; each line is {form}.")
                    entries.append((i + 1, e.groups()))
                i += 1
            lists[kind] = (macro, entries)
        if "TAGS" not in lists or not lists["TAGS"][1]:
            raise GemmtraceError(f"{source} declares no tags: it needs a '#define <NAME>_TAGS(X)' list of "
                                 'X(NAME, id, "name", "group") lines.')
        tags = tuple(Tag(e, int(i_), n, g) for _, (e, i_, n, g) in lists["TAGS"][1])
        if "ROLES" in lists and lists["ROLES"][1]:
            roles = tuple(Role(e, int(i_), n) for _, (e, i_, n) in lists["ROLES"][1])
        else:
            roles = builtin().roles
        return cls(roles, tags, source)

    @classmethod
    def from_meta(cls, meta: dict) -> "Tags | None":
        """The vocabulary a run stored in meta.json (None for runs saved before runs stored one)."""
        v = meta.get("vocabulary") if isinstance(meta, dict) else None
        if not isinstance(v, dict):
            return None
        try:
            roles = tuple(Role(str(r["enum"]), int(r["id"]), str(r["name"])) for r in v["roles"])
            tags = tuple(Tag(str(t["enum"]), int(t["id"]), str(t["name"]), str(t["group"])) for t in v["tags"])
        except (KeyError, TypeError, ValueError):
            raise GemmtraceError("the run's meta.json has a malformed vocabulary (roles and tags).") from None
        return cls(roles, tags, str(v.get("source", "run")))

    def to_meta(self) -> dict:
        return {
            "source": Path(self.source).name if "/" in self.source and self.source != "gemmtrace/tags.h" else self.source,
            "roles": [{"enum": r.enum, "id": r.id, "name": r.name} for r in self.roles],
            "tags": [{"enum": t.enum, "id": t.id, "name": t.name, "group": t.group} for t in self.tags],
        }

    # -- views ---------------------------------------------------------------------------------
    def role_names(self) -> list[str]:
        """Role names indexed by role id; ids no role has are named role<id>."""
        out = [f"role{i}" for i in range(max(r.id for r in self.roles) + 1)]
        for r in self.roles:
            out[r.id] = r.name
        return out

    def tag_names(self) -> list[str]:
        """Tag names indexed by tag id; id 0 is 'none' (never recorded), unused ids tag<id>."""
        out = ["none"] + [f"tag{i}" for i in range(1, max(t.id for t in self.tags) + 1)]
        for t in self.tags:
            out[t.id] = t.name
        return out

    def declared_tag_ids(self) -> set[int]:
        return {t.id for t in self.tags}

    def declared_role_ids(self) -> set[int]:
        return {r.id for r in self.roles}

    @property
    def groups(self) -> dict[str, str]:
        return {t.name: t.group for t in self.tags}


@lru_cache(maxsize=1)
def builtin() -> Tags:
    """gemmtrace's own vocabulary, from gemmtrace/include/gemmtrace/tags.h."""
    t = Tags.from_header(TAGS_HEADER)
    return Tags(t.roles, t.tags, "gemmtrace/tags.h")


def resolve(tags: "Tags | str | Path | None") -> Tags:
    """A vocabulary from a Tags, a header path, or None (gemmtrace's own)."""
    if tags is None:
        return builtin()
    if isinstance(tags, Tags):
        return tags
    if isinstance(tags, (str, Path)):
        return Tags.from_header(tags)
    raise GemmtraceError(f"tags must be a gemmtrace.Tags or a header path, not {type(tags).__name__}.")


# gemmtrace's own vocabulary, as module functions (its kernels and the analysis's defaults).
def roles() -> tuple[Role, ...]:
    return builtin().roles


def tags() -> tuple[Tag, ...]:
    return builtin().tags


def role_names() -> list[str]:
    return builtin().role_names()


def tag_names() -> list[str]:
    return builtin().tag_names()


def tag_groups() -> dict[str, str]:
    return builtin().groups
