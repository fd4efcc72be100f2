"""Vectorized half-open interval arithmetic, one independent interval set per group key.

Groups (an SM, an SM and a tile) are kept apart by *composite coordinates*: a time t in group g
becomes x = g * width + t, with 0 <= t < width. Intervals of different groups then never touch,
so one flat, sorted, disjoint list of [start, end) pairs holds every group's set at once, and
unions, intersections and differences run over all groups in one pass with no loop over groups.

Every function here is a few numpy calls over whole arrays; none loops over intervals in Python.
An "interval list" means two int64 arrays (starts, ends), sorted by start, pairwise disjoint and
not touching, every interval non-empty: what `union_sorted` returns.
"""
from __future__ import annotations

import numpy as np

# Below this many keys a comparison sort beats the radix passes' fixed costs.
_RADIX_MIN_N = 1 << 16
# 16-bit digits: numpy sorts uint16 keys with a linear-time radix sort when kind="stable".
_DIGIT_BITS = 16
# Keys with fewer than n >> this many descents are "a few sorted runs" (see argsort_keys).
_FEW_RUNS_SHIFT = 5


def composite(group: np.ndarray, t: np.ndarray, width: int) -> np.ndarray:
    """x = group * width + t as int64 (callers guarantee 0 <= t < width and no overflow)."""
    return group.astype(np.int64) * np.int64(width) + t


def argsort_keys(key: np.ndarray, key_max: int) -> np.ndarray:
    """A stable argsort of non-negative int64 keys no larger than key_max.

    Large inputs made of a few sorted runs go to timsort; other large inputs through an LSD radix
    sort of 16-bit digits (numpy's stable sort of uint16 is a counting sort), linear in n: about
    three times faster than np.argsort on 10^6 to 10^7 keys.
    """
    n = key.size
    if n < _RADIX_MIN_N or key_max < 0:
        return np.argsort(key, kind="stable")
    descents = int(np.count_nonzero(key[1:] < key[:-1]))
    if descents == 0:
        return np.arange(n)
    if descents < n >> _FEW_RUNS_SHIFT:
        # Few sorted runs (a decoded buffer holds each warp's spans in time order): numpy's stable
        # sort of int64 is a timsort, which merges the runs in about a tenth of the radix time.
        return np.argsort(key, kind="stable")
    bits = max(int(key_max).bit_length(), 1)
    order = None
    for shift in range(0, bits, _DIGIT_BITS):
        digits = key if order is None else key[order]
        if shift:
            digits = digits >> np.int64(shift)
        digit_dtype = np.uint8 if bits - shift <= 8 else np.uint16
        digits = (digits & np.int64((1 << _DIGIT_BITS) - 1)).astype(digit_dtype)
        step = np.argsort(digits, kind="stable")
        order = step if order is None else order[step]
    return order


def union_sorted(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of half-open intervals already sorted by start: merge by a running maximum of ends.

    Empty intervals (end <= start) are dropped; touching intervals are merged.
    """
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    reach = np.maximum.accumulate(ends)
    first = np.empty(starts.size, bool)
    first[0] = True
    np.greater(starts[1:], reach[:-1], out=first[1:])
    idx = np.flatnonzero(first)
    last = np.empty_like(idx)
    last[:-1] = idx[1:] - 1
    last[-1] = starts.size - 1
    return starts[idx].astype(np.int64, copy=False), reach[last].astype(np.int64, copy=False)


def union(starts: np.ndarray, ends: np.ndarray, key_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Union of half-open intervals in any order (composite coordinates in [0, key_max])."""
    order = argsort_keys(starts, key_max)
    return union_sorted(starts[order], ends[order])


def measure_before(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """F(x) = |U ∩ (-inf, x)| for the interval list U = (starts, ends), at each x."""
    lengths = np.concatenate(([0], np.cumsum(ends - starts)))
    j = np.searchsorted(starts, x, side="right")  # intervals that start at or before x
    # The last of those (index j - 1) may extend past x: take off the part after x.
    last_end = np.where(j > 0, ends[np.maximum(j - 1, 0)], x)
    return lengths[j] - np.maximum(last_end - x, 0)


def covered_length(starts: np.ndarray, ends: np.ndarray, qs: np.ndarray, qe: np.ndarray) -> np.ndarray:
    """|[qs, qe) ∩ U| for each query interval, by prefix sums over the interval list U."""
    if starts.size == 0 or qs.size == 0:
        return np.zeros(qs.size, np.int64)
    qe = np.maximum(qe, qs)
    return measure_before(starts, ends, qe) - measure_before(starts, ends, qs)


def intersect(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ∩ B for two interval lists, as an interval list."""
    if a_s.size == 0 or b_s.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # For each a, the b intervals that overlap it are the index range [lo, hi).
    lo = np.searchsorted(b_e, a_s, side="right")
    hi = np.searchsorted(b_s, a_e, side="left")
    count = np.maximum(hi - lo, 0)
    total = int(count.sum())
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    which_a = np.repeat(np.arange(a_s.size), count)
    offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    which_b = lo[which_a] + offset
    s = np.maximum(a_s[which_a], b_s[which_b])
    e = np.minimum(a_e[which_a], b_e[which_b])
    keep = e > s
    return s[keep], e[keep]


def subtract(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A \\ B for two interval lists: A intersected with the complement of B."""
    if a_s.size == 0 or b_s.size == 0:
        return a_s, a_e
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    c_s = np.concatenate(([lo], b_e))
    c_e = np.concatenate((b_s, [hi]))
    return intersect(a_s, a_e, c_s, c_e)


def group_min_max(key: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each distinct non-negative key: (key, min of lo, max of hi); negative keys are skipped.

    When rows with the same key come in long runs (decoded spans come warp by warp in time order),
    the runs are reduced first and then combined per key; otherwise the rows are combined per key
    directly. The result is sorted by key.
    """
    n = key.size
    empty = np.empty(0, np.int64)
    if n == 0:
        return empty, empty, empty
    change = np.flatnonzero(key[1:] != key[:-1]) + 1
    if change.size < n >> 3:
        run_start = np.concatenate(([0], change))
        key = key[run_start]
        lo = np.minimum.reduceat(lo, run_start)
        hi = np.maximum.reduceat(hi, run_start)
    valid = key >= 0
    if not valid.all():
        key, lo, hi = key[valid], lo[valid], hi[valid]
    if key.size == 0:
        return empty, empty, empty
    key_max = int(key.max())
    if key_max < max(4 * key.size, 1 << 20):
        # Dense: a slot per possible key, then keep the slots that were hit.
        out_lo = np.full(key_max + 1, np.iinfo(np.int64).max, np.int64)
        out_hi = np.full(key_max + 1, np.iinfo(np.int64).min, np.int64)
        np.minimum.at(out_lo, key, lo)
        np.maximum.at(out_hi, key, hi)
        keys = np.flatnonzero(out_lo != np.iinfo(np.int64).max)  # the slots some row hit
        return keys.astype(np.int64, copy=False), out_lo[keys], out_hi[keys]
    keys, idx = np.unique(key, return_inverse=True)
    out_lo = np.full(keys.size, np.iinfo(np.int64).max, np.int64)
    out_hi = np.full(keys.size, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(out_lo, idx, lo)
    np.maximum.at(out_hi, idx, hi)
    return keys.astype(np.int64, copy=False), out_lo, out_hi


def dense_index(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each value in them) for small non-negative ints."""
    if values.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    vmax = int(values.max())
    if int(values.min()) >= 0 and vmax < max(4 * values.size, 1 << 20):
        present = np.bincount(values, minlength=vmax + 1) > 0
        if present.all():  # already dense (every SM id 0..S-1 recorded): no gather needed
            return np.arange(vmax + 1, dtype=np.int64), values
        uniq = np.flatnonzero(present)
        lookup = np.cumsum(present) - 1
        return uniq.astype(np.int64), lookup[values]
    uniq, inv = np.unique(values, return_inverse=True)
    return uniq.astype(np.int64), inv
