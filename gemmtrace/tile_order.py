"""Tile orders for persistent kernels: the sequence in which (cluster) tiles are visited.

A tile order is a permutation of the unit ids u = row * cols + col of a rows x cols grid (for the
clustered kernels a unit is a cluster tile: `cluster` vertically adjacent output tiles). The host
builds it once per shape and the kernel reads entry j for its j-th claim, so static schedules
(cluster c takes entries c, c + G, ...) and dynamic ones (the next claim takes the next entry) both
follow it. Orders that keep consecutive units adjacent let the clusters in flight share A and B
panels in L2.
"""
from __future__ import annotations

import numpy as np

from .paths import GemmtraceError

ORDERS = ("row", "snake", "hilbert")
SNAKE_BAND = 8  # unit rows per band of the snake order


def tile_order(rows: int, cols: int, order: str) -> np.ndarray:
    """The unit ids of a rows x cols grid in visiting order, as int32."""
    if rows < 1 or cols < 1:
        raise GemmtraceError(f"a tile grid needs at least one row and one column, got {rows} x {cols}.")
    if order == "row":
        return np.arange(rows * cols, dtype=np.int32)
    if order == "snake":
        return _snake(rows, cols)
    if order == "hilbert":
        r, c = _gilbert(rows, cols)
        return (r * cols + c).astype(np.int32)
    raise GemmtraceError(f"unknown tile order {order!r}; choose one of {', '.join(ORDERS)}.")


def _snake(rows: int, cols: int, band: int = SNAKE_BAND) -> np.ndarray:
    """Bands of `band` rows; each band walked column by column, down one column and up the next,
    its columns left to right in even bands and right to left in odd ones: within a band every
    step moves to a neighbouring cell."""
    r = np.arange(rows)
    c = np.arange(cols)
    b = r // band
    # Sort key per cell: band, then column (reversed in odd bands), then row (reversed in every
    # other column of the walk).
    rr, cc = np.meshgrid(r, c, indexing="ij")
    bb = b[rr]
    col_key = np.where(bb % 2 == 0, cc, cols - 1 - cc)
    row_key = np.where(col_key % 2 == 0, rr, -rr)
    key = np.lexsort((row_key.ravel(), col_key.ravel(), bb.ravel()))
    return (rr.ravel()[key] * cols + cc.ravel()[key]).astype(np.int32)


def _gilbert(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """A generalized Hilbert curve over any rectangle (the 'gilbert' construction: split the
    longer side in two, or the domain in three when it is not too elongated, so every step moves
    to a neighbouring cell, with at most one diagonal step when a side is odd). The grid has a few
    thousand cells at most, so this recursion over cells is cheap."""
    out_r: list[int] = []
    out_c: list[int] = []

    def sign(v: int) -> int:
        return (v > 0) - (v < 0)

    def walk(x: int, y: int, ax: int, ay: int, bx: int, by: int) -> None:
        # (x, y) the start corner; (ax, ay) the major direction, (bx, by) the minor one.
        w, h = abs(ax + ay), abs(bx + by)
        dax, day, dbx, dby = sign(ax), sign(ay), sign(bx), sign(by)
        if h == 1:
            for _ in range(w):
                out_r.append(y), out_c.append(x)
                x, y = x + dax, y + day
            return
        if w == 1:
            for _ in range(h):
                out_r.append(y), out_c.append(x)
                x, y = x + dbx, y + dby
            return
        ax2, ay2, bx2, by2 = ax // 2, ay // 2, bx // 2, by // 2
        w2, h2 = abs(ax2 + ay2), abs(bx2 + by2)
        if 2 * w > 3 * h:  # long: split the major side in two halves
            if w2 % 2 and w > 2:
                ax2, ay2 = ax2 + dax, ay2 + day
            walk(x, y, ax2, ay2, bx, by)
            walk(x + ax2, y + ay2, ax - ax2, ay - ay2, bx, by)
        else:  # up the minor side, across, and back down
            if h2 % 2 and h > 2:
                bx2, by2 = bx2 + dbx, by2 + dby
            walk(x, y, bx2, by2, ax2, ay2)
            walk(x + bx2, y + by2, ax, ay, bx - bx2, by - by2)
            walk(x + (ax - dax) + (bx2 - dbx), y + (ay - day) + (by2 - dby), -bx2, -by2, -(ax - ax2), -(ay - ay2))

    if cols >= rows:
        walk(0, 0, cols, 0, 0, rows)
    else:
        walk(0, 0, 0, rows, cols, 0)
    return np.asarray(out_r, np.int64), np.asarray(out_c, np.int64)
