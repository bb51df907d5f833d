"""One key's watermark between its arrivals in a fleet, compiled with numba: :func:`trace`.

:func:`watermark.strategies.fleet_kernel.run` gives, per arrival, its key's proposal and how the key's
watermark follows the ingestion clock until its next arrival; :func:`trace` replays that over one key's
events (its arrivals and idle ticks) as :class:`watermark.strategies.fleet.FleetWatermark` reports them.
The same source runs uncompiled under ``NUMBA_DISABLE_JIT=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit

_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(fn: _F) -> _F:
    """``fn`` compiled by numba on first call (cached on disk), without the GIL while it runs."""
    return cast(_F, njit(cache=True, nogil=True)(fn))


@_compiled
def trace(
    tp: Any,
    is_arrival: Any,
    proposals: Any,
    offs: Any,
    caps: Any,
    state: Any,
    pre: Any,
    post: Any,
    rise: Any,
    offset: Any,
) -> None:
    """One key's watermark over events (its arrivals and idle ticks), given its arrivals' :func:`run` output.

    ``state`` is ``[wm, off, cap, has_clock, clock]`` before the run (``cap`` ``NO_WATERMARK``: no ramp), and
    is updated. Between events the watermark follows the clock, ``W(t) = max(W, min(t - off, cap))``, with
    the ramp of the last arrival; ``rise``/``offset`` describe it per gap (as a timeline's component does).
    """
    wm, off, cap, has_clock, clock = state[0], state[1], state[2], state[3], state[4]
    k = 0
    for j in range(tp.shape[0]):
        t = tp[j]
        if cap > wm:
            r = wm + off + 1
            if has_clock and r < clock + 1:
                r = clock + 1
            if r <= t:
                rise[j] = r
                offset[j] = off
                wm = min(t - off, cap)
        pre[j] = wm
        if is_arrival[j]:
            if proposals[k] > wm:
                wm = proposals[k]
            off, cap = offs[k], caps[k]
            k += 1
        post[j] = wm
        clock, has_clock = t, 1
    state[0], state[1], state[2], state[3], state[4] = wm, off, cap, has_clock, clock
