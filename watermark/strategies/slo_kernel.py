"""The late-rate SLO rule (:class:`watermark.strategies.slo.LateRateSLO`) compiled with numba.

It runs over flat state arrays.

The rule is a per-arrival loop (each decision depends on the one before), which CPython runs at about
16 us an arrival; compiled, the loop costs well under a microsecond. Only river's ADWIN stays in Python:
the kernel writes the values ADWIN is to be fed into a buffer and stops at the arrivals where ADWIN can
detect a change (every ``clock``-th update, river's own schedule) or where the rule rebuilds it, so the
caller feeds the buffer, handles the change and resumes. Between those arrivals ADWIN's state cannot
influence a decision, so the result is the per-arrival rule exactly.

The batch path lets the kernel run past checks until ``ints[FEED_STOP]`` values wait, on the bet that
ADWIN reports no change among them (it rarely does: about one check in a hundred). The caller keeps a
copy of the state from before the run; when ADWIN does report a change at an earlier check, it puts the
copy back and runs again up to that check (:meth:`watermark.strategies.slo.LateRateSLO._run_timed`).

State lives in three arrays the generator owns (``ints``, ``floats`` and the sample's ring buffers and
sorted copy), indexed by the constants below; the scalar path (``update``/``on_idle``) and the batch path
run the same compiled functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numpy as np
from numba import njit

from watermark.timeutil import NO_WATERMARK

# -- ``ints``: the rule's integer state --------------------------------------------------------------------
MAX_TE: Final = 0  # largest event time seen (NO_WATERMARK before data)
WM: Final = 1  # the watermark
CLOCK: Final = 2  # the ingestion clock (valid when HAS_CLOCK)
HAS_CLOCK: Final = 3
ARRIVALS: Final = 4
LATE: Final = 5
DELAY: Final = 6  # the delay D in force
ANCHOR: Final = 7  # guard after a frontier jump: W <= t + anchor - delay (valid when HAS_ANCHOR)
HAS_ANCHOR: Final = 8
RELEASE: Final = 9  # ingestion time from which the next arrival ends the guard
JUMPS: Final = 10
EXTREME: Final = 11  # arrivals whose lateness was beyond the straggler cap when they arrived
SURGE_UNTIL: Final = 12  # arrivals count up to which the guard after an upward change holds
BURST_UNTIL: Final = 13  # arrivals count up to which the straggler cap is lifted (a burst)
LAST_EXTREME: Final = 14
PREV_EXTREME: Final = 15
FED: Final = 16  # values fed to ADWIN since it was last rebuilt
TICK: Final = 17  # ADWIN's own update count (it checks for a change when it is a multiple of its clock)
HEAD: Final = 18  # ring buffer: position of the oldest sample value
COUNT: Final = 19  # ring buffer: values in the sample (also the sorted copy's length)
N_FEED: Final = 20  # values waiting in the feed buffer
PENDING: Final = 21  # 1: stopped inside an arrival, after its ADWIN update (resume finishes it)
BLOCKS: Final = 22  # blocks in use in the sorted copy
FEED_STOP: Final = 23  # a change check stops the run only once this many values wait (0: every check)
N_INTS: Final = 24

# -- ``floats`` -------------------------------------------------------------------------------------------
LOG_SCALE_AVG: Final = 0
WEIGHT: Final = 1
WEIGHT_AVG: Final = 2
N_FLOATS: Final = 3

# -- ``iparams`` / ``fparams``: the generator's settings ---------------------------------------------------
P_INITIAL: Final = 0
P_WARMUP: Final = 1
P_SAMPLE: Final = 2
P_HORIZON: Final = 3  # -1: no horizon
P_SURGE_ARRIVALS: Final = 4
P_ADWIN_CLOCK: Final = 5
N_IPARAMS: Final = 6
P_SLO: Final = 0
P_STRAGGLER: Final = 1
P_SURGE_FACTOR: Final = 2
N_FPARAMS: Final = 3

#: Arrivals over which an excess of late tuples is won back (the online SLO's horizon).
PAYBACK: Final = 1_000
#: Lateness values a sample needs before its scale sets a straggler cap.
MIN_SCALE_SAMPLE: Final = 50
#: Recent arrivals whose second largest lateness sets the guard after an upward regime change.
SURGE_WINDOW: Final = 50
#: Prior of the straggler share: this many arrivals at half the target.
PRIOR_ARRIVALS: Final = 2_000
#: Exponent of the budget's allocation between regimes (see :class:`watermark.strategies.slo.LateRateSLO`).
ALLOCATION: Final = 1.0
#: Arrivals the long-run averages of the scale and of the weight reach back (exponential).
LONG_RUN: Final = 10_000
#: Values a block of the sample's sorted copy holds at most (the copy is a list of sorted blocks, so a value
#: joins or leaves by moving at most a block, not half the sample). Row ``b`` of the copy is block ``b``:
#: its length in column 0, its values in columns ``1..BLOCK``; blocks ``0..ints[BLOCKS]-1`` in order.
BLOCK: Final = 128


def block_rows(capacity: int) -> int:
    """Rows for the sorted copy of a sample of up to ``capacity`` values.

    A compaction lays the values out in half-full blocks (``capacity / 64`` rows); splits use the spare
    rows, and when they run out the copy is compacted again.
    """
    return 2 * (capacity // BLOCK) + 8


#: ``offset`` of a gap in which the watermark does not move (a step that never happens).
STEP: Final = -(2**62)

_NO_WM: Final = NO_WATERMARK

_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(fn: _F) -> _F:
    """``fn`` compiled by numba on first call (cached on disk), without the GIL while it runs.

    Under ``NUMBA_DISABLE_JIT=1`` numba returns ``fn`` itself, which runs in the interpreter (for debugging).
    """
    return cast(_F, njit(cache=True, nogil=True)(fn))


def _inlined(fn: _F) -> _F:
    """As :func:`_compiled`, and inlined into the compiled functions that call it (numba's IR inlining).

    A call between separately compiled functions passes each array with a reference count taken and given
    back; the rule makes a dozen such calls an arrival, which cost more than its arithmetic. Inlined, they
    cost nothing. Called from Python, the function runs compiled on its own as any other.
    """
    return cast(_F, njit(cache=True, nogil=True, inline="always")(fn))


@_inlined
def _target(ints: Any, now: int) -> int:
    if ints[MAX_TE] == _NO_WM:
        return _NO_WM
    frontier = ints[MAX_TE]
    if ints[HAS_ANCHOR]:
        frontier = min(frontier, now + ints[ANCHOR])
    return frontier - ints[DELAY]


@_inlined
def _raise(ints: Any, proposal: int) -> None:
    if proposal > ints[WM]:
        ints[WM] = proposal


@_inlined
def advance(ints: Any, now: int, arrival: bool) -> None:
    """Move the rule's time to ``now``: end the guard after a jump when its time came, follow the clock."""
    if not ints[HAS_ANCHOR]:
        return
    if arrival and now >= ints[RELEASE]:
        ints[HAS_ANCHOR] = 0  # data from before the jump had its time to arrive
    _raise(ints, _target(ints, now))


@_inlined
def _scale_rank(n: int, fparams: Any) -> int:
    """Rank of the scale (the ``1 - 2 * late_slo_pct / 100`` quantile, at least the median) among ``n``."""
    level = max(0.5, 1.0 - 2.0 * fparams[P_SLO] / 100.0)
    return min(n - 1, int(level * (n - 1)))


@_inlined
def _scale(ints: Any, fparams: Any, srt: Any) -> int:
    return select(ints, srt, _scale_rank(ints[COUNT], fparams))


@_inlined
def select(ints: Any, srt: Any, r: int) -> int:
    """The sample's value of rank ``r`` (0: the smallest), walking the blocks from the nearer end."""
    nb = ints[BLOCKS]
    if 2 * r < ints[COUNT]:
        for b in range(nb):
            c = srt[b, 0]
            if r < c:
                return srt[b, 1 + r]
            r -= c
    else:
        r = ints[COUNT] - 1 - r  # rank from the top
        for b in range(nb - 1, -1, -1):
            c = srt[b, 0]
            if r < c:
                return srt[b, c - r]
            r -= c
    return srt[nb - 1, srt[nb - 1, 0]]  # (not reached for 0 <= r < count)


@_inlined
def _bisect(srt: Any, b: int, c: int, x: int, right: bool) -> int:
    """Where ``x`` goes among block ``b``'s ``c`` values: after its equals (``right``) or before them."""
    lo, hi = 0, c
    while lo < hi:
        mid = (lo + hi) // 2
        v = srt[b, 1 + mid]
        if v < x or (right and v == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@_inlined
def _block_of(ints: Any, srt: Any, x: int, right: bool) -> int:
    """The first block whose largest value is above ``x`` (``right``) or at least ``x``; else the last.

    A binary search over the blocks' largest values, which are in order as the blocks are.
    """
    lo, hi = 0, ints[BLOCKS] - 1
    while lo < hi:
        mid = (lo + hi) // 2
        top = srt[mid, srt[mid, 0]]
        if top < x or (right and top == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@_inlined
def count_le(ints: Any, srt: Any, x: int) -> int:
    """How many of the sample's values are at most ``x`` (``bisect_right`` on the sorted sample).

    The blocks before ``x``'s are counted from the nearer end (``COUNT`` is the total).
    """
    nb = ints[BLOCKS]
    if nb == 0:
        return 0
    b = _block_of(ints, srt, x, True)
    c = srt[b, 0]
    if srt[b, c] <= x:
        return ints[COUNT]
    n = _bisect(srt, b, c, x, True)
    if 2 * b < nb:
        for i in range(b):
            n += srt[i, 0]
        return n
    above = 0
    for i in range(b, nb):
        above += srt[i, 0]
    return ints[COUNT] - above + n


@_compiled
def fill_blocks(ints: Any, srt: Any, ordered: Any) -> None:
    """Lay ``ordered`` (sorted) out as half-full blocks."""
    half = BLOCK // 2
    nb = 0
    for start in range(0, ordered.shape[0], half):
        c = min(half, ordered.shape[0] - start)
        srt[nb, 0] = c
        srt[nb, 1 : c + 1] = ordered[start : start + c]
        nb += 1
    ints[BLOCKS] = nb


@_compiled
def _compact(ints: Any, srt: Any) -> None:
    n = 0
    for b in range(ints[BLOCKS]):
        n += srt[b, 0]
    values = np.empty(n, np.int64)
    n = 0
    for b in range(ints[BLOCKS]):
        c = srt[b, 0]
        values[n : n + c] = srt[b, 1 : c + 1]
        n += c
    fill_blocks(ints, srt, values[:n])


@_inlined
def _insert(ints: Any, srt: Any, x: int) -> None:
    """Add ``x`` to the sorted copy after its equals (``COUNT`` is the caller's)."""
    nb = ints[BLOCKS]
    if nb == 0:
        srt[0, 0] = 1
        srt[0, 1] = x
        ints[BLOCKS] = 1
        return
    b = _block_of(ints, srt, x, True)
    c = srt[b, 0]
    p = 1 + _bisect(srt, b, c, x, True)
    for i in range(c + 1, p, -1):
        srt[b, i] = srt[b, i - 1]
    srt[b, p] = x
    srt[b, 0] = c + 1
    if c + 1 == BLOCK:  # full: split it in two
        if nb + 1 >= srt.shape[0]:
            _compact(ints, srt)
            return
        for i in range(nb - 1, b, -1):
            srt[i + 1, :] = srt[i, :]
        half = BLOCK // 2
        srt[b + 1, 0] = BLOCK - half
        srt[b + 1, 1 : BLOCK - half + 1] = srt[b, half + 1 : BLOCK + 1]
        srt[b, 0] = half
        ints[BLOCKS] = nb + 1


@_inlined
def _remove(ints: Any, srt: Any, x: int) -> None:
    """Take one ``x`` out of the sorted copy (it is there; ``COUNT`` is the caller's)."""
    nb = ints[BLOCKS]
    b = _block_of(ints, srt, x, False)
    c = srt[b, 0]
    p = 1 + _bisect(srt, b, c, x, False)
    for i in range(p, c):
        srt[b, i] = srt[b, i + 1]
    srt[b, 0] = c - 1
    if c == 1:  # empty: drop the block
        for i in range(b, nb - 1):
            srt[i, :] = srt[i + 1, :]
        ints[BLOCKS] = nb - 1


@_inlined
def _cap(ints: Any, fparams: Any, srt: Any) -> int:
    """The straggler cap, or -1 when there is none (too small a sample, or a zero scale)."""
    if ints[COUNT] < MIN_SCALE_SAMPLE:
        return -1
    scale = _scale(ints, fparams, srt)
    if scale == 0:
        return -1
    return math.ceil(fparams[P_STRAGGLER] * scale)


@_inlined
def _drop_oldest(ints: Any, recent: Any, srt: Any) -> None:
    old = recent[ints[HEAD]]
    ints[HEAD] = (ints[HEAD] + 1) % recent.shape[0]
    _remove(ints, srt, old)
    ints[COUNT] -= 1


@_inlined
def _learn(
    ints: Any,
    floats: Any,
    iparams: Any,
    fparams: Any,
    recent: Any,
    recent_tp: Any,
    srt: Any,
    feed: Any,
    lateness: int,
    tp: int,
) -> bool:
    cap = _cap(ints, fparams, srt)
    if cap >= 0 and lateness > cap:
        ints[EXTREME] += 1
        if ints[ARRIVALS] - ints[PREV_EXTREME] <= SURGE_WINDOW:
            # Three values beyond the cap close together are a burst, not stragglers: cover them.
            ints[BURST_UNTIL] = ints[ARRIVALS] + iparams[P_SURGE_ARRIVALS]
        ints[PREV_EXTREME] = ints[LAST_EXTREME]
        ints[LAST_EXTREME] = ints[ARRIVALS]
    size = recent.shape[0]
    k = ints[COUNT]
    slot = (ints[HEAD] + k) % size
    recent[slot] = lateness
    recent_tp[slot] = tp
    _insert(ints, srt, lateness)
    ints[COUNT] = k + 1
    scale = _scale(ints, fparams, srt)
    if scale:
        n = min(ints[ARRIVALS], LONG_RUN)
        log_scale = math.log1p(scale)
        floats[LOG_SCALE_AVG] += (log_scale - floats[LOG_SCALE_AVG]) / n
        floats[WEIGHT] = min(4.0, max(0.25, math.exp(ALLOCATION * (log_scale - floats[LOG_SCALE_AVG]))))
        floats[WEIGHT_AVG] += (floats[WEIGHT] - floats[WEIGHT_AVG]) / n
    if ints[COUNT] > iparams[P_SAMPLE]:
        _drop_oldest(ints, recent, srt)
    horizon = iparams[P_HORIZON]
    if horizon >= 0:
        while recent_tp[ints[HEAD]] <= tp - horizon:
            _drop_oldest(ints, recent, srt)
    value = min(lateness, 2 * ints[DELAY] + 50)  # a burst of outliers is not a new regime
    ints[FED] += 1
    ints[TICK] += 1
    feed[ints[N_FEED]] = math.log1p(value)
    ints[N_FEED] += 1
    # ADWIN can report a change only at this update, or the rule rebuilds it: the caller takes over (at a
    # check, once ``FEED_STOP`` values wait: the batch path checks the values of many checks at once).
    if ints[FED] >= 2 * iparams[P_SAMPLE]:
        return True
    return ints[TICK] % iparams[P_ADWIN_CLOCK] == 0 and ints[N_FEED] >= ints[FEED_STOP]


@_inlined
def observe_head(
    ints: Any,
    floats: Any,
    iparams: Any,
    fparams: Any,
    recent: Any,
    recent_tp: Any,
    srt: Any,
    feed: Any,
    te: int,
    tp: int,
    late: bool,
) -> bool:
    """Take in an arrival up to its ADWIN update; True when the caller must look at ADWIN before the rest."""
    ints[ARRIVALS] += 1
    ints[LATE] += late
    before = ints[MAX_TE]
    if before == _NO_WM:
        ints[MAX_TE] = te
        return False
    # Lateness against the frontier the rule uses: behind a jump, the clock-paced one.
    front = before
    if ints[HAS_ANCHOR]:
        front = min(before, tp + ints[ANCHOR])
    if te - before > 3 * ints[DELAY] + 100:
        ints[JUMPS] += 1
        if not ints[HAS_ANCHOR] or tp + ints[ANCHOR] >= before:
            ints[ANCHOR] = before - tp
            ints[HAS_ANCHOR] = 1
        ints[RELEASE] = tp + (te - before) + ints[DELAY]
    ints[MAX_TE] = max(before, te)
    return _learn(ints, floats, iparams, fparams, recent, recent_tp, srt, feed, max(0, front - te), tp)


@_inlined
def _estimate(ints: Any, floats: Any, iparams: Any, fparams: Any, recent: Any, srt: Any) -> int:
    k = ints[COUNT]
    arrivals = ints[ARRIVALS]
    warmup = iparams[P_WARMUP]
    fade = 0.0 if arrivals >= warmup else 1.0 - arrivals / warmup
    floor = math.ceil(iparams[P_INITIAL] * fade)
    if k == 0:
        return max(floor, iparams[P_INITIAL] if arrivals < warmup else 0)
    target = fparams[P_SLO] / 100.0
    allowed = target * (arrivals + PAYBACK) - ints[LATE]
    level = min(target, max(target / 4.0, allowed / PAYBACK))
    share = (ints[EXTREME] + target / 2 * PRIOR_ARRIVALS) / (arrivals + PRIOR_ARRIVALS)
    cap = _cap(ints, fparams, srt)
    if cap >= 0 and share < target and arrivals > ints[BURST_UNTIL]:
        # Stragglers fit in the budget: leave them late, spend the rest on the regular values.
        k = count_le(ints, srt, cap)
        level = max(target / 10.0, (level - share) / (1.0 - share))
        level = min(target, level * floats[WEIGHT] / floats[WEIGHT_AVG])
    rank = min(k - 1, max(0, math.ceil((1.0 - level) * k) - 1))
    delay = select(ints, srt, rank)
    if arrivals <= ints[SURGE_UNTIL]:
        # Just after a rise the regime may still be rising: headroom over the recent high values.
        size = recent.shape[0]
        newest = (ints[HEAD] + ints[COUNT] - 1) % size
        first = second = np.int64(-1)
        for i in range(min(SURGE_WINDOW, ints[COUNT])):
            v = recent[(newest - i) % size]
            if v > first:
                second = first
                first = v
            elif v > second:
                second = v
        high = second if second >= 0 else first
        delay = max(delay, math.ceil(fparams[P_SURGE_FACTOR] * high))
    return max(floor, delay)


@_inlined
def observe_tail(ints: Any, floats: Any, iparams: Any, fparams: Any, recent: Any, srt: Any, tp: int) -> None:
    """Finish an arrival after ADWIN: the guard's end, the new delay, the watermark."""
    if ints[HAS_ANCHOR] and tp + ints[ANCHOR] >= ints[MAX_TE]:
        ints[HAS_ANCHOR] = 0  # caught up with the frontier
    ints[DELAY] = _estimate(ints, floats, iparams, fparams, recent, srt)
    _raise(ints, _target(ints, tp))


@_compiled
def run_events(
    te: Any,
    tp: Any,
    is_arrival: Any,
    start: int,
    ints: Any,
    floats: Any,
    iparams: Any,
    fparams: Any,
    recent: Any,
    recent_tp: Any,
    srt: Any,
    feed: Any,
    pre: Any,
    post: Any,
    rise: Any,
    offset: Any,
) -> int:
    """Run the rule over events ``start..`` (arrivals and idle ticks); the event it stopped at, or ``n``.

    It stops inside an arrival whose ADWIN update may report a change (``ints[PENDING]`` is then 1 and
    ``pre`` is written, ``post`` not yet); calling it again from that event finishes the arrival.
    """
    n = te.shape[0]
    j = start
    if ints[PENDING]:
        ints[PENDING] = 0
        observe_tail(ints, floats, iparams, fparams, recent, srt, tp[j])
        post[j] = ints[WM]
        j += 1
    while j < n:
        t = tp[j]
        if ints[HAS_ANCHOR] and ints[HAS_CLOCK]:
            rise[j] = ints[CLOCK] + 1
            offset[j] = ints[DELAY] - ints[ANCHOR]
        ints[CLOCK] = t
        ints[HAS_CLOCK] = 1
        arrival = is_arrival[j]
        advance(ints, t, arrival)
        pre[j] = ints[WM]
        if arrival:
            e = te[j]
            if observe_head(ints, floats, iparams, fparams, recent, recent_tp, srt, feed, e, t, e < ints[WM]):
                ints[PENDING] = 1
                return j
            observe_tail(ints, floats, iparams, fparams, recent, srt, t)
        post[j] = ints[WM]
        j += 1
    return n


@_compiled
def log1p_all(values: Any) -> Any:
    """``log(1 + v)`` of each value, as the rule feeds ADWIN."""
    out = np.empty(values.shape[0], np.float64)
    for i in range(values.shape[0]):
        out[i] = math.log1p(values[i])
    return out


@_compiled
def mean_log(values: Any) -> float:
    """The mean of ``log(1 + v)`` over ``values`` (summed in order)."""
    total = 0.0
    for i in range(values.shape[0]):
        total += math.log1p(values[i])
    return total / values.shape[0]
