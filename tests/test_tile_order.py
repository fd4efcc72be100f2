"""Host-side tile orders: permutations of all tiles, walking between neighbours (CPU only)."""
import numpy as np
import pytest

from gemmtrace import GemmtraceError
from gemmtrace.tile_order import ORDERS, tile_order

GRIDS = [(1, 1), (1, 7), (7, 1), (2, 3), (5, 5), (9, 9), (8, 16), (33, 17), (3, 100), (64, 64), (17, 3)]


@pytest.mark.parametrize("rows,cols", GRIDS)
@pytest.mark.parametrize("order", ORDERS)
def test_every_order_is_a_permutation_of_all_tiles(rows, cols, order):
    t = tile_order(rows, cols, order)
    assert t.dtype == np.int32 and t.shape == (rows * cols,)
    assert np.array_equal(np.sort(t), np.arange(rows * cols))


def steps(t, cols):
    r, c = t // cols, t % cols
    return np.maximum(np.abs(np.diff(r)), np.abs(np.diff(c)))


@pytest.mark.parametrize("rows,cols", GRIDS)
def test_hilbert_moves_to_a_neighbour_at_every_step(rows, cols):
    t = tile_order(rows, cols, "hilbert")
    assert rows * cols == 1 or steps(t, cols).max() == 1


@pytest.mark.parametrize("rows,cols", GRIDS)
def test_snake_moves_to_a_neighbour_within_each_band(rows, cols):
    t = tile_order(rows, cols, "snake")
    band = (t // cols) // 8
    same_band = band[1:] == band[:-1]
    assert (steps(t, cols)[same_band] <= 1).all()


def test_hilbert_and_snake_touch_fewer_panels_per_wave():
    """The A row panels plus B column panels that 132 consecutive tiles need (one wave, one tile per
    SM): what a wave pulls through L2. Row order spans whole rows of C; the others stay compact."""
    rows, cols = 64, 64

    def panels(t):
        return len(np.unique(t // cols)) + len(np.unique(t % cols))

    row = panels(tile_order(rows, cols, "row")[:132])
    assert panels(tile_order(rows, cols, "hilbert")[:132]) < row / 2
    assert panels(tile_order(rows, cols, "snake")[:132]) < row / 2


def test_bad_input_is_one_sentence():
    with pytest.raises(GemmtraceError, match="unknown tile order"):
        tile_order(4, 4, "zigzag")
    with pytest.raises(GemmtraceError, match="at least one"):
        tile_order(0, 4, "row")
