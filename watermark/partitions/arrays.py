"""Array utilities of the partition combination that the replay and the tuner use too.

Partition keys numbered in order of first appearance (:func:`factorize`), the rows of each code
(:func:`rows_by_code`), distinct pairs of codes with their counts (:func:`unique_pairs`), and whether each key
lives in one partition (:func:`one_partition_per_key`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray


def plain_key(key: Any) -> Hashable:
    """Partition keys as plain JSON-friendly Python values (numpy scalars unwrapped)."""
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, bool) or not isinstance(key, str | int):
        msg = f"partition keys must be strings or integers, got {key!r}"
        raise ValueError(msg)
    return key


def factorize(values: ArrayLike) -> tuple[list[Hashable], NDArray[np.intp]]:
    """Codes of ``values`` numbered in order of first appearance, and the distinct values in that order."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        msg = f"partition must be one-dimensional, got shape {arr.shape}"
        raise ValueError(msg)
    if arr.dtype.kind in "iu" and arr.size:
        low, high = int(arr.min()), int(arr.max())
        if high - low < 4096:  # small integer codes (partitions 0..P-1): no sort needed
            offset = (arr - low).astype(np.intp)
            present = np.flatnonzero(np.bincount(offset, minlength=high - low + 1))
            if present.size <= 64:
                firsts = np.array([int(np.argmax(offset == v)) for v in present.tolist()], np.intp)
                ranked = present[np.argsort(firsts, kind="stable")]
                table = np.empty(high - low + 1, np.intp)
                table[ranked] = np.arange(ranked.size)
                return [plain_key(int(v) + low) for v in ranked.tolist()], table[offset]
    if arr.dtype.kind in "iuU":
        uniq, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return [plain_key(uniq[i]) for i in order], rank[inverse].astype(np.intp)
    if arr.dtype == object and arr.size:
        fast = _factorize_strings(arr)
        if fast is not None:
            return fast
    index: dict[Hashable, int] = {}
    codes = np.fromiter((index.setdefault(plain_key(v), len(index)) for v in arr.tolist()), np.intp, arr.size)
    return list(index), codes


def _factorize_strings(arr: NDArray[Any]) -> tuple[list[Hashable], NDArray[np.intp]] | None:
    """:func:`factorize` of an object array of strings, in Arrow's C++ (None if not all are strings)."""
    import pyarrow as pa

    try:
        encoded = pa.array(arr, type=pa.string()).dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if encoded.indices.null_count:
        return None
    # Arrow numbers the dictionary in order of first appearance, as factorize does.
    codes: NDArray[np.intp] = encoded.indices.to_numpy().astype(np.intp)
    return encoded.dictionary.to_pylist(), codes


def rows_by_code(codes: NDArray[np.intp], count: int) -> list[NDArray[np.intp]]:
    """The row positions of each code ``0 .. count - 1``, each in increasing order (one stable sort).

    With thousands of partitions (keys in the keyed mode) a scan per code would cost rows x partitions.

    >>> [r.tolist() for r in rows_by_code(np.array([1, 0, 1, 2, 0]), 4)]
    [[1, 4], [0, 2], [3], []]
    """
    if count <= 32:  # a scan per code is cheaper than the sort for a few partitions
        return [np.flatnonzero(codes == c) for c in range(count)]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(count + 1), side="left")
    return [order[bounds[c] : bounds[c + 1]] for c in range(count)]


def unique_pairs(
    a: ArrayLike, b: ArrayLike
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """The distinct pairs ``(a[i], b[i])`` in lexicographic order, and how many times each occurs.

    What ``np.unique(np.stack([a, b]), axis=1, return_counts=True)`` gives, through a 1-D sort: each pair
    becomes one integer while the ranges' product fits in int64 (else a lexicographic sort). NumPy's
    unique over an axis sorts byte strings and was the largest cost of a re-tuning's replays (the windows
    of every partition of every candidate).

    >>> [x.tolist() for x in unique_pairs([3, 1, 3, 1, 3], [20, 5, 10, 5, 20])]
    [[1, 3, 3], [5, 10, 20], [2, 1, 2]]
    """
    x = np.asarray(a, np.int64)
    y = np.asarray(b, np.int64)
    if x.size == 0:
        empty = np.empty(0, np.int64)
        return empty, empty.copy(), empty.copy()
    x0, y0 = int(x.min()), int(y.min())
    span = int(y.max()) - y0 + 1
    if (int(x.max()) - x0 + 1) * span < 2**62:
        codes, counts = np.unique((x - x0) * span + (y - y0), return_counts=True)
        return codes // span + x0, codes % span + y0, counts.astype(np.int64)
    order = np.lexsort((y, x))
    sx, sy = x[order], y[order]
    first = np.ones(sx.size, np.bool_)
    first[1:] = (sx[1:] != sx[:-1]) | (sy[1:] != sy[:-1])
    at = np.flatnonzero(first)
    return sx[at], sy[at], np.diff(np.append(at, sx.size)).astype(np.int64)


def one_partition_per_key(keys: ArrayLike, parts: ArrayLike) -> bool:
    """Whether each key code of ``keys`` occurs with a single partition code of ``parts`` (row by row).

    >>> one_partition_per_key([0, 1, 0], [5, 6, 5]), one_partition_per_key([0, 1, 0], [5, 6, 7])
    (True, False)
    """
    pair_keys, _, _ = unique_pairs(keys, parts)
    return bool(np.unique(pair_keys).size == pair_keys.size)
