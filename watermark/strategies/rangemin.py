"""Vectorised range-minimum queries: ``min(values[lo[k]:hi[k]])`` for many windows at once."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from watermark.timeutil import INT64_MAX

_BLOCK = 32


def range_min(values: NDArray[np.int64], lo: NDArray[np.intp], hi: NDArray[np.intp]) -> NDArray[np.int64]:
    """Minimum of each window ``values[lo[k]:hi[k]]``; requires ``0 <= lo < hi <= len(values)``.

    Blocks of 32 with prefix and suffix minima answer windows that span blocks; a sparse table over block
    minima covers the blocks in between; ``numpy.minimum.reduceat`` answers windows inside one block. Work is
    ``O(n log n / 32)`` plus the total length of in-block windows, and, when the windows are sorted by their
    start (as sliding windows are), ``O(n)`` for the gaps ``reduceat`` walks between them.

    Examples
    --------
    >>> import numpy as np
    >>> from watermark.strategies.rangemin import range_min
    >>> range_min(np.array([5, 3, 8, 1, 9]), np.array([0, 2, 4]), np.array([2, 4, 5])).tolist()
    [3, 1, 9]

    """
    out = np.empty(lo.size, np.int64)
    if lo.size == 0:
        return out
    n = values.size
    nb = -(-n // _BLOCK)
    padded = np.full(nb * _BLOCK, INT64_MAX, np.int64)
    padded[:n] = values
    blocks = padded.reshape(nb, _BLOCK)
    prefix = np.minimum.accumulate(blocks, axis=1).ravel()
    suffix = np.minimum.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    table = [blocks.min(axis=1)]
    width = 1
    while 2 * width <= nb:
        prev = table[-1]
        table.append(np.minimum(prev[:-width], prev[width:]))
        width *= 2

    last = hi - 1
    b_lo = lo // _BLOCK
    b_hi = last // _BLOCK
    same = b_lo == b_hi
    if same.any():
        idx = np.empty(2 * int(np.count_nonzero(same)), np.intp)
        idx[0::2] = lo[same]
        idx[1::2] = hi[same]
        extended = np.append(values, INT64_MAX)
        out[same] = np.minimum.reduceat(extended, idx)[0::2]
    cross = ~same
    if cross.any():
        c_lo, c_last = lo[cross], last[cross]
        res = np.minimum(suffix[c_lo], prefix[c_last])
        inner_lo = b_lo[cross] + 1
        inner_len = b_hi[cross] - inner_lo
        has_inner = inner_len > 0
        if has_inner.any():
            i_lo = inner_lo[has_inner]
            i_len = inner_len[has_inner]
            level = np.floor(np.log2(i_len)).astype(np.intp)
            inner = np.empty(i_lo.size, np.int64)
            for k in np.unique(level):
                sel = level == k
                row = table[int(k)]
                span = 1 << int(k)
                inner[sel] = np.minimum(row[i_lo[sel]], row[i_lo[sel] + i_len[sel] - span])
            res[has_inner] = np.minimum(res[has_inner], inner)
        out[cross] = res
    return out
