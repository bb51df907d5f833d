"""What a record must meet to be counted: the part of the job's options that validating records needs.

:class:`RecordRules` (:attr:`jobs.stream.options.JobOptions.record_rules`), and the bounds of the flags
that set a record's time and size limits, with their checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.stream.options import Fields


#: ``--max-event-ahead-ms``: how far an event time may be ahead of its own arrival time (clock skew) before
#: the record is quarantined as ``event_time_ahead_of_arrival``. In the bundled streams an event time is
#: never ahead of its arrival (largest event - arrival: 0 ms in debs2015-taxi-sample, -22 ms and -30 ms in
#: ooo-iot-d1/d2) nor in the synthetic ones (arrival = event + a delay >= 0); 5 minutes leaves room for
#: producers whose clocks are minutes off (ooo-iot's NTP offsets reach 6 s) and caps what one record can do
#: to its partition's watermark at 5 minutes instead of the future bound's day.
DEFAULT_MAX_EVENT_AHEAD_MS = 300_000
#: The largest ``--max-event-ahead-ms`` (one day: the future bound's default).
MAX_EVENT_AHEAD_LIMIT_MS = 86_400_000
#: ``--max-arrival-ahead-ms``: how far a record's own arrival time may be ahead of the batch's ingestion
#: time before the record is quarantined as ``arrival_time_in_future``. A record arrives before the batch
#: that reads it, so only a producer's clock puts it ahead: 5 minutes, as for the event time. With the
#: future bound's day instead, one record 23 hours ahead moved the ingestion clock (``ingestion``'s
#: watermark, the idle timeout) by 23 hours, and every record after it was late.
DEFAULT_MAX_ARRIVAL_AHEAD_MS = 300_000
#: ``--max-record-bytes``: a record's line may be this long; a longer one is quarantined as
#: ``record_too_long`` and never read whole (jobs.stream.sources.long_lines). 16 MiB: 256 fields of the
#: 64 KiB ``--max-field-bytes`` allows.
DEFAULT_MAX_RECORD_BYTES = 16 << 20
#: The range of ``--max-record-bytes``: from a KiB to a GiB (what one reader may hold of a line).
MAX_RECORD_BYTES_RANGE = (1 << 10, 1 << 30)


@dataclass(frozen=True)
class RecordRules:
    """A record's fields' names and the bounds of its times and sizes.

    What reading and validating a batch's records needs of :class:`~jobs.stream.options.JobOptions`
    (:attr:`~jobs.stream.options.JobOptions.record_rules`; :mod:`jobs.stream.sources.batch_input`,
    :mod:`jobs.stream.sources.arrow_reader`).
    """

    fields: Fields
    future_bound_ms: int
    max_field_bytes: int
    max_event_ahead_ms: int
    max_record_bytes: int
    max_arrival_ahead_ms: int = DEFAULT_MAX_ARRIVAL_AHEAD_MS


def check_max_event_ahead_ms(value: int) -> int:
    """``--max-event-ahead-ms`` as given, or ValueError outside ``[0, one day]``.

    >>> check_max_event_ahead_ms(0), check_max_event_ahead_ms(86_400_000)
    (0, 86400000)
    """
    if not 0 <= value <= MAX_EVENT_AHEAD_LIMIT_MS:
        msg = f"--max-event-ahead-ms must be between 0 and {MAX_EVENT_AHEAD_LIMIT_MS} (one day), got {value}"
        raise ValueError(msg)
    return value


def check_max_arrival_ahead_ms(value: int) -> int:
    """``--max-arrival-ahead-ms`` as given, or ValueError outside ``[0, one day]``.

    >>> check_max_arrival_ahead_ms(300_000)
    300000
    """
    if not 0 <= value <= MAX_EVENT_AHEAD_LIMIT_MS:
        msg = (
            f"--max-arrival-ahead-ms must be between 0 and {MAX_EVENT_AHEAD_LIMIT_MS} (one day), got {value}"
        )
        raise ValueError(msg)
    return value


def check_max_record_bytes(value: int) -> int:
    """``--max-record-bytes`` as given, or ValueError outside :data:`MAX_RECORD_BYTES_RANGE`.

    >>> check_max_record_bytes(1024)
    1024
    """
    low, high = MAX_RECORD_BYTES_RANGE
    if not low <= value <= high:
        msg = f"--max-record-bytes must be between {low} and {high} (1 KiB to 1 GiB), got {value}"
        raise ValueError(msg)
    return value
