"""river's ADWIN as plain data: its window buckets in a JSON-ready dict, and back, without pickle.

river 0.26 keeps ADWIN's window in a compiled ``AdaptiveWindowing`` object whose only state interface is
``__getstate__``/``__setstate__`` over a bincode blob of its Rust struct (fixed-width little-endian
integers, ``u64`` lengths; the Python binding appends its constructor's arguments). A checkpoint must not
hold a pickle (restoring one runs code) nor an opaque blob (a damaged one aborts the process in a Rust
panic), so this module decodes the blob into named fields — parameters, running sums, counters and each
exponential-histogram bucket's totals and variances — and, on restore, validates every field before it
encodes the blob ``__setstate__`` takes. The restored detector continues exactly as the saved one (the
same floats, the same clock phase).

Encoding checks itself: a river release that changes the struct's layout makes :func:`adwin_state` fail
with a clear message at the first save (the decoded fields must re-encode to the very bytes river wrote),
never a silently different detector.

Examples
--------
>>> from river.drift import ADWIN
>>> a = ADWIN(delta=0.01)
>>> for x in [0.0] * 100 + [5.0] * 60:
...     a.update(x)
>>> b = restore_adwin(adwin_state(a))
>>> [b.width, b.total, b.n_detections] == [a.width, a.total, a.n_detections]
True
>>> for x in [5.0] * 40:
...     _ = a.update(x), b.update(x)
>>> (b.width, b.total, b.drift_detected) == (a.width, a.total, a.drift_detected)
True

"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from river.drift import ADWIN

#: Version of this dict layout (not river's).
FORMAT = 1
_MAX_BUCKET_ROWS = 64  # a row holds 2**row values: 64 rows exceed any window width
_MAX_BUCKET_SIZE = 1024
_PARAMS = ("delta", "clock", "max_buckets", "min_window_length", "grace_period")
_SUMS = ("total", "variance", "width", "total_width")
_COUNTERS = ("n_buckets", "max_n_buckets", "tick", "n_detections")
_TRAILER = (("delta", "<d"), ("clock", "<i"), ("max_buckets", "<Q"), ("min_window_length", "<i"),
            ("grace_period", "<i"))  # fmt: skip


class _Reader:
    def __init__(self, blob: bytes) -> None:
        self.blob, self.at = blob, 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.blob):
            msg = "river's ADWIN state is shorter than its layout"
            raise ValueError(msg)
        (value,) = struct.unpack_from(fmt, self.blob, self.at)
        self.at += size
        return value

    def floats(self) -> list[float]:
        n = self.take("<Q")
        if n > _MAX_BUCKET_SIZE + 1:
            msg = f"river's ADWIN state has a bucket of {n} entries"
            raise ValueError(msg)
        return [float(self.take("<d")) for _ in range(n)]


def new_adwin(**params: Any) -> ADWIN:
    """A new ``river.drift.ADWIN(**params)``, river imported with the first detector a process builds.

    ``river.drift`` imports ``scipy.stats`` (for KSWIN) and river's datasets: about a second of CPU that a
    process which never builds a detector (Spark's Python workers on the Arrow path, which import the
    watermark package for its window specification) does not pay.
    """
    from river.drift import ADWIN

    return ADWIN(**params)


def adwin_state(adwin: ADWIN) -> dict[str, Any]:
    """The detector's complete state as JSON-ready plain data (see the module docstring)."""
    blob = bytes(adwin._helper.__getstate__())
    r = _Reader(blob)
    state: dict[str, Any] = {"format": FORMAT, "drift_detected": bool(adwin.drift_detected)}
    state["delta"] = r.take("<d")
    state["clock"] = r.take("<i")
    state["max_buckets"] = r.take("<Q")
    state["min_window_length"] = int(r.take("<d"))
    state["grace_period"] = int(r.take("<d"))
    for name in _SUMS:
        state[name] = r.take("<d")
    for name in _COUNTERS:
        state[name] = r.take("<i")
    buckets = []
    for _ in range(r.take("<Q")):
        r.take("<Q")  # max_size: the detector's max_buckets
        current = r.take("<Q")
        buckets.append({"current": current, "totals": r.floats(), "variances": r.floats()})
    state["buckets"] = buckets
    # The Python binding appends its constructor's arguments (the same parameters, as it was built).
    for _name, fmt in _TRAILER:
        r.take(fmt)
    if r.at != len(blob) or _encode(state) != blob:
        msg = (
            "river's ADWIN state does not have the layout watermark.strategies.adwin_state reads (river "
            "0.26's AdaptiveWindowing); pin river at the version in requirements.lock"
        )
        raise RuntimeError(msg)
    # The sensitivity the detector rebuilds its window with after a drift (``ADWIN.delta``): a change made
    # since the last reset is not in the blob until the next update resets it.
    state["next_delta"] = float(adwin.delta)
    return state


def restore_adwin(state: Mapping[str, Any]) -> ADWIN:
    """A detector that continues exactly as the saved one; ValueError when ``state`` is damaged."""
    if not isinstance(state, Mapping) or state.get("format") != FORMAT:
        msg = f"ADWIN state must be a mapping with format {FORMAT}"
        raise ValueError(msg)
    checked = _checked(state)
    adwin = new_adwin(
        delta=checked["next_delta"],  # the blob below sets the window's own
        clock=checked["clock"],
        max_buckets=checked["max_buckets"],
        min_window_length=checked["min_window_length"],
        grace_period=checked["grace_period"],
    )
    adwin._helper.__setstate__(_encode(checked))
    adwin._drift_detected = checked["drift_detected"]
    return adwin


def _checked(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with every field of the right type and range; ValueError naming the first that is not."""

    def number(name: str, value: Any, kind: type, low: float, high: float) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            msg = f"ADWIN state: {name} must be a number, got {value!r}"
            raise ValueError(msg)
        if kind is int and (not float(value).is_integer()):
            msg = f"ADWIN state: {name} must be an integer, got {value!r}"
            raise ValueError(msg)
        if not (math.isfinite(value) and low <= value <= high):
            msg = f"ADWIN state: {name} must be in [{low}, {high}], got {value!r}"
            raise ValueError(msg)
        return kind(value)

    i32 = 2**31 - 1
    out: dict[str, Any] = {"drift_detected": bool(state.get("drift_detected", False))}
    try:
        out["delta"] = number("delta", state["delta"], float, 1e-300, 1.0)
        out["next_delta"] = number("next_delta", state.get("next_delta", out["delta"]), float, 1e-300, 1.0)
        out["clock"] = number("clock", state["clock"], int, 1, i32)
        out["max_buckets"] = number("max_buckets", state["max_buckets"], int, 1, _MAX_BUCKET_SIZE)
        out["min_window_length"] = number("min_window_length", state["min_window_length"], int, 1, i32)
        out["grace_period"] = number("grace_period", state["grace_period"], int, 0, i32)
        for name in _SUMS:
            out[name] = number(name, state[name], float, -math.inf, math.inf)
        for name in _COUNTERS:
            out[name] = number(name, state[name], int, 0, i32)
        buckets = state["buckets"]
    except KeyError as exc:
        msg = f"ADWIN state lacks {exc.args[0]!r}"
        raise ValueError(msg) from None
    if not isinstance(buckets, list) or not 1 <= len(buckets) <= _MAX_BUCKET_ROWS:
        msg = f"ADWIN state: buckets must be a list of 1 to {_MAX_BUCKET_ROWS} rows"
        raise ValueError(msg)
    size = out["max_buckets"] + 1
    rows = []
    for k, row in enumerate(buckets):
        if not isinstance(row, Mapping):
            msg = f"ADWIN state: bucket row {k} must be a mapping"
            raise ValueError(msg)
        current = number(f"buckets[{k}].current", row.get("current"), int, 0, size)
        lists = []
        for name in ("totals", "variances"):
            values = row.get(name)
            if not isinstance(values, list) or len(values) != size:
                msg = f"ADWIN state: buckets[{k}].{name} must hold {size} numbers"
                raise ValueError(msg)
            lists.append([number(f"buckets[{k}].{name}", v, float, -math.inf, math.inf) for v in values])
        rows.append({"current": current, "totals": lists[0], "variances": lists[1]})
    out["buckets"] = rows
    return out


def _encode(state: Mapping[str, Any]) -> bytes:
    """The bincode blob of river's ``AdaptiveWindowing`` for a checked ``state``."""
    parts = [
        struct.pack("<d", state["delta"]),
        struct.pack("<i", state["clock"]),
        struct.pack("<Q", state["max_buckets"]),
        struct.pack("<d", float(state["min_window_length"])),
        struct.pack("<d", float(state["grace_period"])),
        *(struct.pack("<d", state[name]) for name in _SUMS),
        *(struct.pack("<i", state[name]) for name in _COUNTERS),
        struct.pack("<Q", len(state["buckets"])),
    ]
    for row in state["buckets"]:
        parts.append(struct.pack("<QQ", state["max_buckets"], row["current"]))
        for name in ("totals", "variances"):
            values = row[name]
            parts.append(struct.pack(f"<Q{len(values)}d", len(values), *values))
    parts.extend(struct.pack(fmt, state[name]) for name, fmt in _TRAILER)
    return b"".join(parts)
