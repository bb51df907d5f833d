"""The fleet rule (:class:`watermark.strategies.fleet.Fleet`) compiled with numba, over flat state arrays.

One function, :func:`run`, takes arrivals of any keys in arrival order and returns, per arrival, the watermark
its key proposes right after it (its frontier, guarded after a congestion, minus its delay and the congestion
delays); the watermark between a key's arrivals is :mod:`watermark.strategies.fleet_trace_kernel`'s. The
scalar path (one arrival) and the batch path (a whole batch of every key) run the same compiled code in the
same order, so their results are equal by construction. The same source runs uncompiled under
``NUMBA_DISABLE_JIT=1``: that is the pure-Python reference the tests compare the compiled kernel with.

State (see the constants below): per key ``kints`` / ``kfloats`` rows (with the guard after a congestion and
the transit figures), a log-spaced lag histogram ``hist`` and the pending lags of a suspected clock step
``pend``; for the fleet ``fints`` / ``ffloats`` (the congestion delays) and the fleet histogram ``fhist``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numpy as np
from numba import njit

from watermark.timeutil import NO_WATERMARK

# -- histogram bins ---------------------------------------------------------------------------------------
#: Bins per doubling of the lag (a bin spans 9 % of its lag).
PER_OCTAVE: Final = 8
#: Bins: lag 0, then up to 2**34 ms (200 days; larger lags go in the last bin).
N_BINS: Final = 1 + PER_OCTAVE * 34

#: ``EDGES[b]``: the delay that covers bin ``b`` entirely (every lag ``<= EDGES[b]``): bin ``b >= 1`` holds
#: lags up to ``ceil(2 ** (b / 8)) - 1`` ms.
EDGES: Final = np.array([0] + [math.ceil(2.0 ** (b / PER_OCTAVE)) - 1 for b in range(1, N_BINS)], np.int64)

# -- per-key ints -------------------------------------------------------------------------------------------
K_REF: Final = 0  # the key's reference: its largest event time since its last re-base (NO_WATERMARK: none)
K_RUN: Final = 1  # arrivals in the current run of lags beyond the step threshold
K_RUN_MAX: Final = 2  # largest event time of that run
K_STEPS: Final = 3  # clock steps detected (re-bases)
K_DELAY: Final = 4  # the key's allocated delay (ms), before the congestion factor
K_COUNT: Final = 5  # arrivals since the last allocation
K_WM: Final = 6  # the key's own proposed watermark so far (lateness feedback)
K_ARRIVALS: Final = 7
K_LATE: Final = 8
K_LAST: Final = 9  # the key's last arrival time
K_LIVE: Final = 10  # 1 while the key's last arrival came within its usual transit (it sends in real time)
K_OFF: Final = 11  # (following the clock) between arrivals W(t) >= min(t - K_OFF, K_CAP)
K_CAP: Final = 12
K_GUARD_OFF: Final = 13  # while guarded (after a frontier jump) the frontier is at most now - K_GUARD_OFF
K_GUARD_END: Final = 14  # the guard ends at the key's first arrival at or after this (NO_WATERMARK: none)
#: While guarded: the largest event time of the key's records that came in behind its reference (the held
#: records' progress; the frontier is at least this), and the progress that ends the guard (the event time
#: of the fresh record that started it, less two of the key's event-time gaps before it).
K_GUARD_FILL: Final = 15
K_GUARD_TOP: Final = 16
N_KINTS: Final = 17

# -- per-key floats -----------------------------------------------------------------------------------------
F_INC: Final = 0  # weight of the next arrival in the histogram (grows: older ones decay relatively)
F_TOTAL: Final = 1  # the histogram's mass
F_RATE: Final = 2  # arrivals per allocation period (exponential average)
F_BASE: Final = 3  # the key's low baseline of tp - te (its clock offset plus the usual transit)
F_SHORT: Final = 4  # recent mean of log(1 + transit above the baseline)
F_LONG: Final = 5  # long-run mean of the same
F_GAP: Final = 6  # recent mean step of the key's reference (its event-time gap between arrivals)
F_PEAK: Final = 7  # recent peak of the transit above the baseline (decays by 1/e over PEAK_MS)
F_PREV: Final = 8  # the transit tp - te of the key's last arrival
F_SPREAD_SHORT: Final = 9  # recent mean of log(1 + |change of the transit from the key's last arrival|)
F_SPREAD_LONG: Final = 10  # long-run mean of the same
N_KFLOATS: Final = 11

# -- fleet ints / floats ------------------------------------------------------------------------------------
G_CLOCK: Final = 0
G_HAS_CLOCK: Final = 1
G_NEXT: Final = 2  # the next instant of the allocation grid
G_ARRIVALS: Final = 3
G_LATE: Final = 4
G_ALLOCATIONS: Final = 5
G_NEW_DELAY: Final = 6  # the delay of a key the fleet has not seen yet (the fleet's own quantile)
G_KEYS: Final = 7  # key slots in use
N_FINTS: Final = 8
H_INC: Final = 0
H_TOTAL: Final = 1
H_CONGESTION: Final = 2  # the congestion delay in force (ms), added to every key's delay
H_LAMBDA: Final = 3  # the Lagrange multiplier of the last allocation (diagnostics)
H_LEVEL: Final = 4  # the congestion delay of a raised transit level (ms), added to live keys' delays
# The surge (``surge > 0``): the transits above their keys' baselines of the fleet's last arrivals from live
# keys (a ring of SURGE_RING, one per key), the instant until which the fleet surges, its threshold and
# cover, and the decayed histogram of the calm arrivals' transits above their keys' baselines (behind the
# scalars; its weight and mass just before it, as H_INC and H_TOTAL are for the fleet histogram).
H_RING: Final = 5
SURGE_RING: Final = 3
H_RING_KEY: Final = H_RING + SURGE_RING  # one more than the key slot of each transit in the ring (0: none)
H_RING_N: Final = H_RING_KEY + SURGE_RING  # transits put in the ring so far
H_SURGE_UNTIL: Final = H_RING_N + 1  # the fleet surges while its clock is before this (ms)
H_SURGE_AT: Final = H_SURGE_UNTIL + 1  # the surge's threshold: SURGE_FACTOR calm medians (ms; 0: not yet)
H_SURGE_COVER: Final = H_SURGE_UNTIL + 2  # the live keys' delay while surging (ms)
H_CALM_INC: Final = H_SURGE_UNTIL + 3
H_CALM_TOTAL: Final = H_SURGE_UNTIL + 4
H_CALM_HIST: Final = H_SURGE_UNTIL + 5
N_FFLOATS: Final = H_CALM_HIST + N_BINS

# -- parameters ---------------------------------------------------------------------------------------------
P_PERIOD: Final = 0
P_INITIAL: Final = 1
P_STEP_RUN: Final = 2
P_STEP_MIN: Final = 3
P_MEMORY: Final = 4
P_GUARD_MIN: Final = 5  # smallest frontier jump that starts a guard (0: none)
N_IPARAMS: Final = 6
P_TARGET: Final = 0  # target late share (a fraction)
P_PRIOR: Final = 1  # pseudo-arrivals of the fleet's lag distribution in each key's
P_CONGESTION: Final = 2  # weight of the fleet's excess transit in every key's delay (0: none)
P_LEAD: Final = 3  # how many event-time gaps the frontier may run ahead of the reference (0: never)
P_FOLLOW: Final = 4  # 1: between arrivals a live key's frontier follows the ingestion clock
P_SURGE: Final = 5  # the live keys' delay while the fleet surges, in the surge's medians (0: no surge)
N_FPARAMS: Final = 6

#: Longest run of large lags a clock step is detected after (the pending buffer's width).
MAX_STEP_RUN: Final = 16
#: Arrivals over which an excess of late tuples is won back (the budget tightens to half the target at most).
PAYBACK: Final = 2_000
#: Arrivals of the fleet over which the initial delay fades.
WARMUP: Final = 200
#: Weight of the last period in a key's arrival rate.
RATE_WEIGHT: Final = 0.25
#: Arrivals the event-time gap averages over.
GAP_ARRIVALS: Final = 16
#: Arrivals the recent transit level averages over.
SHORT: Final = 4
#: The surge's threshold, in calm medians of the transit above the baseline.
SURGE_FACTOR: Final = 4.0
#: Detections over which the surge's cover averages (an exponential average, restarted at each surge).
SURGE_AVERAGE: Final = 4.0
#: A live key's least delay while the fleet is calm (``surge > 0``), in surge thresholds.
SURGE_FLOOR: Final = 2.5
#: A key counts in the congestion median after this many arrivals.
MIN_CONGESTION_ARRIVALS: Final = 20
#: Ingestion time over which a key's transit peak decays by 1/e.
PEAK_MS: Final = 30_000.0
#: A key below this rate (arrivals per period) is inactive: out of the budget, its delay kept.
MIN_RATE: Final = 1e-3

#: Weight of the fleet's transit spread in the congestion delay of every key, relative to ``congestion``.
SPREAD_WEIGHT: Final = 3.0
_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(fn: _F) -> _F:
    return cast(_F, njit(cache=True, nogil=True)(fn))


def _inlined(fn: _F) -> _F:
    return cast(_F, njit(cache=True, nogil=True, inline="always")(fn))


_EDGES = EDGES
_NO_WM: Final = NO_WATERMARK
#: "Never": a guard's progress target once it was reached.
_MAX_I64: Final = 2**63 - 1


@_inlined
def bin_of(lag: int) -> int:
    """The histogram bin of a lag: the first bin whose largest lag is at least ``lag``."""
    if lag <= 0:
        return 0
    lo, hi = 1, N_BINS - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _EDGES[mid] >= lag:
            hi = mid
        else:
            lo = mid + 1
    return lo


@_inlined
def _add_decayed(hist: Any, floats: Any, inc_at: int, lag: int, memory: int) -> None:
    """Add ``lag`` to a decayed histogram: its weight at ``floats[inc_at]``, its mass at ``inc_at + 1``.

    Each addition weighs ``1 + 1 / memory`` times the one before (older ones decay relatively); a weight of
    0 (a histogram not used yet) starts at 1.
    """
    inc = floats[inc_at]
    if inc == 0.0:
        inc = 1.0
    hist[bin_of(lag)] += inc
    floats[inc_at + 1] += inc
    inc *= 1.0 + 1.0 / memory
    if inc > 1e100:  # rescale: only ratios matter
        for b in range(N_BINS):
            hist[b] /= inc
        floats[inc_at + 1] /= inc
        inc = 1.0
    floats[inc_at] = inc


@_inlined
def _add(hist: Any, kfloats: Any, fhist: Any, ffloats: Any, s: int, lag: int, memory: int) -> None:
    """Add a lag of key ``s`` to its histogram and to the fleet's (whose memory is 8 times longer)."""
    _add_decayed(hist[s], kfloats[s], F_INC, lag, memory)
    _add_decayed(fhist, ffloats, H_INC, lag, 8 * memory)


@_inlined
def _add_calm(ffloats: Any, lag: int, memory: int) -> None:
    """Add a calm arrival's transit above its key's baseline to the fleet's decayed calm histogram."""
    _add_decayed(ffloats[H_CALM_HIST : H_CALM_HIST + N_BINS], ffloats, H_CALM_INC, lag, memory)


@_inlined
def _calm_median(ffloats: Any) -> float:
    """The calm histogram's median (the largest transit of the bin holding it; 0 while it is empty)."""
    half = 0.5 * ffloats[H_CALM_TOTAL]
    acc = 0.0
    for b in range(N_BINS):
        acc += ffloats[H_CALM_HIST + b]
        if acc >= half and acc > 0.0:
            return float(_EDGES[b])
    return 0.0


@_inlined
def _median(values: Any, n: int) -> float:
    """The median of ``values[:n]`` (``n >= 1``)."""
    med = np.sort(values[:n])
    mid = n // 2
    m: float = med[mid] if n % 2 == 1 else 0.5 * (med[mid - 1] + med[mid])
    return m


@_compiled
def allocate(
    kints: Any, kfloats: Any, hist: Any, fints: Any, ffloats: Any, fhist: Any, iparams: Any, fparams: Any
) -> None:
    """Choose every active key's delay for the next period, and the congestion delays.

    ``d_k = argmin_d [d + lambda * r_k * S_k(d)]`` over the bins' edges, where ``r_k`` is the key's arrival
    rate and ``S_k`` its lag survival function shrunk toward the fleet's (weight ``m / (n_k + m)``); the
    multiplier ``lambda`` is set by bisection (on its logarithm) to the smallest value whose expected late
    arrivals ``sum r_k S_k(d_k)`` fit in the budget ``x * sum r_k``.
    """
    nk = fints[G_KEYS]
    period = iparams[P_PERIOD]
    # Periods since the last allocation (the grid may have skipped empty ones): rates decay over each.
    elapsed = 1
    if fints[G_ALLOCATIONS] > 0:
        elapsed = max(1, (fints[G_CLOCK] - fints[G_NEXT]) // period + 1)
    keep = (1.0 - RATE_WEIGHT) ** elapsed
    fints[G_ALLOCATIONS] += 1
    # The budget, tightened while the late share so far is above the target (won back over PAYBACK).
    x = fparams[P_TARGET]
    allowed = x * (fints[G_ARRIVALS] + PAYBACK) - fints[G_LATE]
    budget = min(x, max(x / 2.0, allowed / PAYBACK))
    # The fleet's survival function: mass above each bin.
    fs = np.zeros(N_BINS, np.float64)
    ftop = 0
    ftotal = ffloats[H_TOTAL]
    if ftotal > 0.0:
        acc = 0.0
        for b in range(N_BINS - 1, -1, -1):
            fs[b] = acc / ftotal
            if acc == 0.0 and fhist[b] > 0.0:
                ftop = b
            acc += fhist[b]
    # The delay of a key not seen yet: the fleet's own quantile at the budget.
    new_delay = 0
    for b in range(N_BINS):
        if fs[b] <= budget:
            new_delay = _EDGES[b]
            break
    n_fleet = fints[G_ARRIVALS]
    floor = 0
    if n_fleet < WARMUP:
        floor = math.ceil(iparams[P_INITIAL] * (1.0 - n_fleet / WARMUP))
    fints[G_NEW_DELAY] = max(floor, new_delay) if ftotal > 0.0 else iparams[P_INITIAL]
    if fparams[P_SURGE] > 0.0:  # the surge's threshold: SURGE_FACTOR calm medians
        ffloats[H_SURGE_AT] = SURGE_FACTOR * _calm_median(ffloats)
    # Per key: rate, top bin; the congestion ratios.
    top = np.zeros(nk, np.int64)
    rate = np.zeros(nk, np.float64)
    ratios = np.zeros(nk, np.float64)
    levels = np.zeros(nk, np.float64)
    n_ratios = 0
    total_rate = 0.0
    width = 1
    for s in range(nk):
        r = kfloats[s, F_RATE]  # (a new key's first rate is its count)
        r = kints[s, K_COUNT] if r == 0.0 else r * keep + RATE_WEIGHT * kints[s, K_COUNT]
        kfloats[s, F_RATE] = r
        kints[s, K_COUNT] = 0
        if r < MIN_RATE or kints[s, K_REF] == _NO_WM:
            continue
        rate[s] = r
        total_rate += r
        if kints[s, K_ARRIVALS] >= MIN_CONGESTION_ARRIVALS:
            # (beyond twice the usual level: the usual noise of a short average is no congestion)
            ratios[n_ratios] = math.expm1(kfloats[s, F_SPREAD_SHORT]) - 2.0 * math.expm1(
                kfloats[s, F_SPREAD_LONG]
            )
            levels[n_ratios] = math.expm1(kfloats[s, F_SHORT]) - 2.0 * math.expm1(kfloats[s, F_LONG])
            n_ratios += 1
        # Its top bin: its own highest lag, or the fleet's when that is higher. No delay above it is ever
        # chosen (:func:`choose_bins`), so its survival is computed up to there only.
        t = ftop
        for b in range(N_BINS - 1, ftop, -1):
            if hist[s, b] > 0.0:
                t = b
                break
        top[s] = t
        width = max(width, t + 1)
    # Per active key: its lag survival function shrunk toward the fleet's, up to its top bin
    # (``(n * own + prior * fleet) / (n + prior)``, with ``own`` its mass above each bin over its total).
    prior = fparams[P_PRIOR]
    surv = np.empty((nk, width), np.float64)  # (a key reads its row up to its top bin only)
    for s in range(nk):
        if rate[s] == 0.0:
            continue
        total = kfloats[s, F_TOTAL]
        n = total / kfloats[s, F_INC] if total > 0.0 else 0.0  # effective arrivals in the histogram
        own_w, fleet_w = 0.0, 1.0
        if n + prior > 0.0:
            own_w = n / ((n + prior) * total) if total > 0.0 else 0.0
            fleet_w = prior / (n + prior)
        acc = 0.0
        for b in range(top[s], -1, -1):
            surv[s, b] = own_w * acc + fleet_w * fs[b]
            acc += hist[s, b]
    # Congestion: the median over keys of their recent transit spread (every key) and level (live keys) above
    # twice their long-run ones (ms).
    congestion = 0.0
    level = 0.0
    if n_ratios > 0 and fparams[P_CONGESTION] > 0.0:
        congestion = max(0.0, _median(ratios, n_ratios)) * fparams[P_CONGESTION] * SPREAD_WEIGHT
        level = max(0.0, _median(levels, n_ratios)) * fparams[P_CONGESTION]
    ffloats[H_LEVEL] = max(level, ffloats[H_LEVEL] - elapsed * period / 2.0)
    # It unwinds at half the pace of time: the records a congestion held back (by about its delay) are still
    # arriving, behind fresh ones, for that long after it ends.
    ffloats[H_CONGESTION] = max(congestion, ffloats[H_CONGESTION] - elapsed * period / 2.0)
    if total_rate <= 0.0:
        return
    # (a warm start from the last multiplier: H_LAMBDA is 0 before the first allocation)
    start = math.log(ffloats[H_LAMBDA]) if ffloats[H_LAMBDA] > 0.0 else math.nan
    best, hi = choose_bins(rate, surv, top, budget * total_rate, start)
    ffloats[H_LAMBDA] = math.exp(hi)
    for s in range(nk):
        if rate[s] > 0.0:
            kints[s, K_DELAY] = max(floor, _EDGES[best[s]])


@_inlined
def _choices_at(middle: float, rate: Any, surv: Any, low_bin: Any, high_bin: Any, choice: Any) -> float:
    """Each key's first cheapest bin between its bounds at multiplier ``exp(middle)``; the expected late."""
    lam = math.exp(middle)
    late = 0.0
    for s in range(rate.shape[0]):
        if rate[s] == 0.0:
            continue
        w = lam * rate[s]
        bb = low_bin[s]
        cost = _EDGES[bb] + w * surv[s, bb]
        for b in range(bb + 1, high_bin[s] + 1):
            c = _EDGES[b] + w * surv[s, b]
            if c < cost:
                cost = c
                bb = b
        choice[s] = bb
        late += rate[s] * surv[s, bb]
    return late


@_inlined
def _probe(
    at: float,
    rate: Any,
    surv: Any,
    allowed_late: float,
    low_bin: Any,
    high_bin: Any,
    choice: Any,
    best: Any,
    over: Any,
) -> bool:
    """The choices at ``exp(at)``: the bracket's new upper end if they fit the budget (True), else its lower.

    Within the budget they are the best so far and bound every later choice from above (the multiplier
    only falls from there); over it, they are ``over`` and bound every later choice from below.
    """
    if _choices_at(at, rate, surv, low_bin, high_bin, choice) <= allowed_late:
        best[:] = choice
        high_bin[:] = choice
        return True
    over[:] = choice
    low_bin[:] = choice
    return False


#: Bounds of the multiplier's logarithm, and the bisection's precision on it from a warm start.
LOG_LAMBDA_MIN: Final = -20.0
LOG_LAMBDA_MAX: Final = 60.0
LOG_LAMBDA_TOL: Final = 1e-7


@_compiled
def choose_bins(rate: Any, surv: Any, top: Any, allowed_late: float, start: float) -> tuple[Any, float]:
    """Each key's delay bin at the smallest multiplier whose expected late arrivals fit ``allowed_late``.

    ``b_k = first argmin_b [EDGES[b] + lambda * rate_k * surv[k, b]]`` over ``b <= top_k`` (keys of rate 0
    get bin 0), the multiplier bisected on its logarithm over [-20, 60]; what the choice at the multiplier
    leaves of the budget is spent by :func:`_fill`. Returns the bins and ``log(lambda)``.

    A key's choice never falls as the multiplier rises (with ``surv`` falling in ``b``, the first minimum
    moves to longer delays as the weight grows), so the choices at the bracket's ends bound the next one:
    each step scans only the bins between them, not every bin up to ``top_k``.

    ``start`` (NaN: none): the logarithm of the last allocation's multiplier, which moves little from one
    allocation to the next. The bracket then starts around it (widened until it holds the multiplier) and
    the bisection stops at a precision of :data:`LOG_LAMBDA_TOL`; without it, 48 halvings of [-20, 60].
    """
    nk = rate.shape[0]
    best = np.zeros(nk, np.int64)
    choice = np.zeros(nk, np.int64)
    over = np.zeros(nk, np.int64)  # the choice at the largest multiplier found over the budget
    low_bin = np.zeros(nk, np.int64)
    high_bin = top.copy()
    found = False
    missed = False
    lo, hi = LOG_LAMBDA_MIN, LOG_LAMBDA_MAX
    if math.isnan(start):
        for _ in range(48):
            middle = 0.5 * (lo + hi)
            if _probe(middle, rate, surv, allowed_late, low_bin, high_bin, choice, best, over):
                hi, found = middle, True
            else:
                lo, missed = middle, True
    else:
        # Up from just above the start until the budget holds (or the largest multiplier)...
        width = 0.5
        at = min(LOG_LAMBDA_MAX, max(LOG_LAMBDA_MIN, start) + width)
        while True:
            if _probe(at, rate, surv, allowed_late, low_bin, high_bin, choice, best, over):
                hi, found = at, True
                break
            lo, missed = at, True
            if at >= LOG_LAMBDA_MAX:
                break
            width *= 4.0
            at = min(LOG_LAMBDA_MAX, at + width)
        # ... and down from just below it until it does not (or the smallest multiplier).
        width = 0.5
        at = max(LOG_LAMBDA_MIN, hi - 2.0 * width)
        while found and not missed:
            if not _probe(at, rate, surv, allowed_late, low_bin, high_bin, choice, best, over):
                lo, missed = at, True
                break
            hi = at
            if at <= LOG_LAMBDA_MIN:
                break
            width *= 4.0
            at = max(LOG_LAMBDA_MIN, at - width)
        while found and missed and hi - lo > LOG_LAMBDA_TOL:
            middle = 0.5 * (lo + hi)
            if _probe(middle, rate, surv, allowed_late, low_bin, high_bin, choice, best, over):
                hi = middle
            else:
                lo = middle
    if not found:  # (the top bins cover everything: the largest lambda always fits)
        for s in range(nk):
            best[s] = top[s]
    elif missed:
        _fill(best, over, rate, surv, allowed_late)
    return best, hi


@_compiled
def _fill(best: Any, over: Any, rate: Any, surv: Any, allowed_late: float) -> None:
    """Spend what the multiplier's choice leaves of the budget: keys move to their choice just over it.

    At the critical multiplier several keys can be indifferent between a cover and a shorter delay (keys
    pooled toward the same fleet tail: one straggler of a key seconds late makes every key weigh it); the
    Lagrangian then moves them all at once and the fleet covers the tail on every key while a few would do.
    Keys move, the most latency saved per expected late arrival first, while the budget holds.
    """
    nk = best.size
    late = 0.0
    for s in range(nk):
        if rate[s] > 0.0:
            late += rate[s] * surv[s, best[s]]
    gain = np.zeros(nk, np.float64)
    cost = np.zeros(nk, np.float64)
    for s in range(nk):
        if rate[s] > 0.0 and over[s] < best[s]:
            cost[s] = rate[s] * (surv[s, over[s]] - surv[s, best[s]])
            saved = float(_EDGES[best[s]] - _EDGES[over[s]])
            gain[s] = saved / cost[s] if cost[s] > 0.0 else np.inf
    for s in np.argsort(-gain, kind="mergesort"):
        if gain[s] <= 0.0:
            break
        if late + cost[s] <= allowed_late:
            late += cost[s]
            best[s] = over[s]


@_inlined
def _ahead(kfloats: Any, s: int, lead: float) -> int:
    return int(math.ceil(lead * kfloats[s, F_GAP]))


@_inlined
def _frontier(kints: Any, kfloats: Any, s: int, lead: float, now: int) -> int:
    """The key's frontier at ``now`` (its last arrival time, or later when following the clock).

    Its reference, or ahead of it up to ``now`` minus its transit baseline while the key is live (its last
    arrival came within its usual transit: it sends in real time, so its next event time is about a gap
    ahead), by at most ``lead`` event-time gaps. A key flushing a backlog (arrivals far behind the clock) is
    not live: its frontier is its reference. While the key is guarded after a congestion, the frontier is at
    most ``now - K_GUARD_OFF``: it follows the clock from where the held records are.
    """
    ref: int = kints[s, K_REF]
    front = ref
    if kints[s, K_LIVE]:
        front = int(max(ref, min(now - math.ceil(kfloats[s, F_BASE]), ref + _ahead(kfloats, s, lead))))
    if kints[s, K_GUARD_END] != _NO_WM:
        front = min(front, max(now - kints[s, K_GUARD_OFF], kints[s, K_GUARD_FILL]))
    return front


@_inlined
def _guard_progress(kints: Any, s: int, e: int, ref: int, t: int) -> None:
    """A guarded key's arrival: the held records' progress, and the guard's end once they came."""
    if e < ref:  # a held record: the gap behind the fresh one fills
        kints[s, K_GUARD_FILL] = max(kints[s, K_GUARD_FILL], e)
    if t >= kints[s, K_GUARD_END]:
        kints[s, K_GUARD_END] = _NO_WM  # the held records had their time to arrive
    elif kints[s, K_GUARD_FILL] >= kints[s, K_GUARD_TOP]:
        # They came: the gap up to the fresh record is filled. The guard ends once the stragglers among
        # them had the key's delay to come.
        kints[s, K_GUARD_END] = min(kints[s, K_GUARD_END], t + kints[s, K_DELAY] + 1)
        kints[s, K_GUARD_TOP] = _MAX_I64


@_inlined
def _congested(kints: Any, ffloats: Any, s: int, t: int, surge: bool) -> int:
    """The congestion delays (ms) that cover the key's lags: every key's, and a live key's level or surge."""
    congested: int = math.ceil(ffloats[H_CONGESTION])
    if kints[s, K_LIVE]:
        level = ffloats[H_LEVEL]
        if surge and t < ffloats[H_SURGE_UNTIL]:
            level = max(level, ffloats[H_SURGE_COVER])
        congested += math.ceil(level)
    return congested


@_inlined
def _hold_pending(
    kints: Any, kfloats: Any, pend: Any, s: int, e: int, lag: int, offset: int, run: int
) -> None:
    """A lag far beyond the key's delay (disorder or a clock stepped back), held; ``run`` in a row re-base."""
    run_len = kints[s, K_RUN]
    kints[s, K_RUN_MAX] = e if run_len == 0 else max(kints[s, K_RUN_MAX], e)
    pend[s, run_len] = lag
    kints[s, K_RUN] = run_len + 1
    if run_len + 1 >= run:
        kints[s, K_REF] = kints[s, K_RUN_MAX]
        kints[s, K_RUN] = 0
        kints[s, K_STEPS] += 1
        kfloats[s, F_BASE] = offset


@_inlined
def _reference_rises(
    kints: Any, kfloats: Any, s: int, e: int, ref: int, t: int, offset: int, guard: int
) -> None:
    """The key's event time moves past its reference: its gap, and a guard if its frontier jumped.

    A frontier jump (the event time moved further than the clock since the key's last arrival: its transit
    fell, by more than ``guard`` > 0) ends a congestion: the frontier follows the clock from the held
    records' transit until they had time to come.
    """
    gap_before = kfloats[s, F_GAP]
    kfloats[s, F_GAP] += (e - ref - kfloats[s, F_GAP]) / min(kints[s, K_ARRIVALS] - 1, GAP_ARRIVALS)
    level = kfloats[s, F_BASE] + math.expm1(kfloats[s, F_SHORT])
    jump = min(kints[s, K_LAST] - ref, math.ceil(level)) - offset
    held = max(kints[s, K_LAST] - ref, math.ceil(kfloats[s, F_BASE] + kfloats[s, F_PEAK]))
    if guard > 0 and jump > max(guard, 3 * kints[s, K_DELAY] + 100):
        target = e - max(1, math.ceil(2.0 * gap_before))
        until = t + held - offset + kints[s, K_DELAY]
        # A new guard, unless one is in force whose held records are still coming (one whose gap was filled,
        # ending after the stragglers' time, gives way to this one).
        if kints[s, K_GUARD_END] == _NO_WM or kints[s, K_GUARD_TOP] == _MAX_I64:
            kints[s, K_GUARD_FILL] = ref  # the held records start after the old reference
            kints[s, K_GUARD_TOP] = target
            kints[s, K_GUARD_OFF] = held
            kints[s, K_GUARD_END] = until
        else:
            kints[s, K_GUARD_TOP] = max(kints[s, K_GUARD_TOP], target)
            kints[s, K_GUARD_OFF] = max(kints[s, K_GUARD_OFF], held)
            kints[s, K_GUARD_END] = max(kints[s, K_GUARD_END], until)


@_inlined
def _transit(
    kints: Any, kfloats: Any, s: int, t: int, offset: int, memory: int, guard: int
) -> tuple[float, int]:
    """The key's transit above its baseline (falling at once, rising slowly), its peak and levels.

    Returns the transit above the baseline and the arrivals the averages take in.
    """
    base = kfloats[s, F_BASE]
    if offset < base:
        base = offset
    else:
        base += (offset - base) / memory
    kfloats[s, F_BASE] = base
    excess = max(0.0, offset - base)
    silence = t - kints[s, K_LAST]
    kfloats[s, F_PEAK] = max(excess, kfloats[s, F_PEAK] * math.exp(-silence / PEAK_MS))
    v = math.log1p(excess)
    seen = kints[s, K_ARRIVALS] - 1  # (averages over the arrivals so far until they fill)
    kfloats[s, F_SHORT] += (v - kfloats[s, F_SHORT]) / min(seen, SHORT)
    if (
        guard > 0
        and silence >= excess > max(guard, 3 * kints[s, K_DELAY] + 100)
        and silence > 4.0 * kfloats[s, F_GAP]
    ):
        # The first record after a silence, sent during it: the head of a backlog (a device back
        # from offline), not one straggler among live records. Its transit is the key's recent
        # one, so a fresh record right behind it is a frontier jump and guards the backlog.
        kfloats[s, F_SHORT] = max(kfloats[s, F_SHORT], v)
    kfloats[s, F_LONG] += (v - kfloats[s, F_LONG]) / min(seen, memory)
    return excess, seen


@_inlined
def _watch_surge(
    kints: Any, kfloats: Any, ffloats: Any, fparams: Any, s: int, t: int, excess: float, memory: int
) -> None:
    """The surge: the median of the fleet's last few transits above their keys' baselines.

    Past SURGE_FACTOR calm medians, a regime of longer transits on every key at once. Only live keys count:
    a key far behind the clock (a backlog, a clock stepped back not re-based yet) is no regime of the fleet's.
    """
    lead = fparams[P_LEAD]
    live = lead > 0.0 and t - kints[s, K_REF] <= math.ceil(kfloats[s, F_BASE]) + _ahead(kfloats, s, lead)
    if not live:
        return
    # The last live arrivals of SURGE_RING different keys: one key whose transit jumped alone
    # (its clock stepped back) is no regime of the fleet's (nor is a fleet of fewer keys one).
    nf = int(ffloats[H_RING_N])
    pos = nf % SURGE_RING
    for j in range(SURGE_RING):
        if ffloats[H_RING_KEY + j] == s + 1:
            pos = j
            nf -= 1  # (a key's newer transit in its place: no new entry)
            break
    nf += 1
    ffloats[H_RING_N] = nf
    ffloats[H_RING + pos] = excess
    ffloats[H_RING_KEY + pos] = s + 1
    at = ffloats[H_SURGE_AT]
    x0, x1, x2 = ffloats[H_RING], ffloats[H_RING + 1], ffloats[H_RING + 2]
    med = max(min(x0, x1), min(max(x0, x1), x2))
    if nf >= SURGE_RING and at > 0.0 and med > at:
        # Its cover: ``surge`` of its medians, averaged over its detections; it lasts as long
        # after the last one (what it held back arrives behind fresh records for that long).
        cover = fparams[P_SURGE] * med
        if t < ffloats[H_SURGE_UNTIL]:
            cover = ffloats[H_SURGE_COVER] + (cover - ffloats[H_SURGE_COVER]) / SURGE_AVERAGE
        ffloats[H_SURGE_COVER] = cover
        ffloats[H_SURGE_UNTIL] = t + cover
    elif t >= ffloats[H_SURGE_UNTIL]:
        _add_calm(ffloats, math.ceil(excess), 8 * memory)


@_compiled
def run(
    slots: Any,
    te: Any,
    tp: Any,
    clocks: Any,
    kints: Any,
    kfloats: Any,
    hist: Any,
    pend: Any,
    fints: Any,
    ffloats: Any,
    fhist: Any,
    iparams: Any,
    fparams: Any,
    out: Any,
    out_off: Any,
    out_cap: Any,
) -> None:
    """Take in arrivals (key slot, event time, arrival time) in arrival order.

    Per arrival, its key's proposal right after it (``out``) and how the key's watermark follows the clock
    until its next arrival, ``W(t) >= min(t - out_off, out_cap)`` (``out_cap`` ``NO_WATERMARK``: it does
    not). ``clocks`` holds each slot's ingestion clock before the run (an arrival behind it counts at it, as
    its generator treats it), and is updated.
    """
    follow = fparams[P_FOLLOW] > 0.0
    lead = fparams[P_LEAD]
    period = iparams[P_PERIOD]
    memory = iparams[P_MEMORY]
    step_run = iparams[P_STEP_RUN]
    step_min = iparams[P_STEP_MIN]
    guard_min = iparams[P_GUARD_MIN]
    surge = fparams[P_SURGE] > 0.0
    for i in range(te.shape[0]):
        s = slots[i]
        e = te[i]
        t = max(tp[i], clocks[s])
        clocks[s] = t
        if not fints[G_HAS_CLOCK]:
            fints[G_HAS_CLOCK] = 1
            fints[G_CLOCK] = t
            fints[G_NEXT] = (t // period + 1) * period
        elif t > fints[G_CLOCK]:
            fints[G_CLOCK] = t
        if fints[G_CLOCK] >= fints[G_NEXT]:
            allocate(kints, kfloats, hist, fints, ffloats, fhist, iparams, fparams)
            fints[G_NEXT] = (fints[G_CLOCK] // period + 1) * period
        # Lateness against the key's own watermark (the feedback that keeps the late share on target).
        ref = kints[s, K_REF]
        w_at = kints[s, K_WM]
        if follow and kints[s, K_LIVE]:  # the clock moved it since the key's last arrival
            w_at = max(w_at, min(t - kints[s, K_OFF], kints[s, K_CAP]))
        late = e < w_at
        kints[s, K_ARRIVALS] += 1
        kints[s, K_LATE] += late
        kints[s, K_COUNT] += 1
        fints[G_ARRIVALS] += 1
        fints[G_LATE] += late
        offset = t - e
        if ref == _NO_WM:  # a key's first arrival: its reference and baseline
            kints[s, K_REF] = e
            kints[s, K_DELAY] = fints[G_NEW_DELAY]
            kfloats[s, F_INC] = 1.0
            kfloats[s, F_BASE] = offset
        else:
            if kints[s, K_GUARD_END] != _NO_WM:
                _guard_progress(kints, s, e, ref, t)
            front = _frontier(kints, kfloats, s, lead, t if follow else kints[s, K_LAST])
            lag = max(0, front - e)
            congested = _congested(kints, ffloats, s, t, surge)
            if lag > max(step_min, 4 * kints[s, K_DELAY]):
                _hold_pending(kints, kfloats, pend, s, e, lag, offset, step_run)
            else:
                for j in range(kints[s, K_RUN]):  # the run ended: it was disorder after all
                    _add(hist, kfloats, fhist, ffloats, s, max(0, pend[s, j] - congested), memory)
                kints[s, K_RUN] = 0
                # What the congestion delay covers is the congestion's, not the key's own disorder.
                own = max(0, lag - congested)
                if own > 0 or kints[s, K_LIVE] or lead == 0.0:
                    _add(hist, kfloats, fhist, ffloats, s, own, memory)
                if e > ref:
                    _reference_rises(kints, kfloats, s, e, ref, t, offset, guard_min)
                kints[s, K_REF] = max(ref, e)
            excess, seen = _transit(kints, kfloats, s, t, offset, memory, guard_min)
            if surge:
                _watch_surge(kints, kfloats, ffloats, fparams, s, t, excess, memory)
            v = math.log1p(abs(offset - kfloats[s, F_PREV]))
            kfloats[s, F_SPREAD_SHORT] += (v - kfloats[s, F_SPREAD_SHORT]) / min(seen, SHORT)
            kfloats[s, F_SPREAD_LONG] += (v - kfloats[s, F_SPREAD_LONG]) / min(seen, memory)
        kints[s, K_LAST] = t
        kfloats[s, F_PREV] = offset
        ahead = _ahead(kfloats, s, lead)
        kints[s, K_LIVE] = ahead > 0 and t - kints[s, K_REF] <= math.ceil(kfloats[s, F_BASE]) + ahead
        delay = kints[s, K_DELAY] + math.ceil(ffloats[H_CONGESTION])
        if kints[s, K_LIVE]:
            delay += math.ceil(ffloats[H_LEVEL])
            if surge:  # surging: the surge's cover; calm: at least the floor
                if t < ffloats[H_SURGE_UNTIL]:
                    delay = max(delay, math.ceil(ffloats[H_SURGE_COVER]))
                else:
                    delay = max(delay, math.ceil(SURGE_FLOOR * ffloats[H_SURGE_AT]))
        proposal = _frontier(kints, kfloats, s, lead, t) - delay
        kints[s, K_OFF] = math.ceil(kfloats[s, F_BASE]) + delay
        if kints[s, K_GUARD_END] != _NO_WM:
            kints[s, K_OFF] = max(kints[s, K_OFF], kints[s, K_GUARD_OFF] + delay)
        kints[s, K_CAP] = kints[s, K_REF] + ahead - delay
        if proposal > w_at:
            w_at = proposal
        kints[s, K_WM] = w_at
        out[i] = proposal
        if follow and kints[s, K_LIVE]:
            out_off[i] = kints[s, K_OFF]
            out_cap[i] = kints[s, K_CAP]
        else:
            out_off[i] = 0
            out_cap[i] = _NO_WM  # no ramp
