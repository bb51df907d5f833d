"""Issue 29, items 10 and 11 (part), without Spark: how far an event time may be ahead of its arrival time
(``event_time_ahead_of_arrival``), and records too long to read whole (``record_too_long``). The job on
landing files: tests/integration/spark/test_record_bounds.py."""

import pytest

from jobs.common.schemas import QUARANTINE_REASONS
from jobs.stream.cli import main
from jobs.stream.options import DEFAULT_MAX_EVENT_AHEAD_MS, JobOptions
from watermark.config import PipelineConfig
from watermark.io import read_stream
from watermark.synthetic import generate


def test_event_time_ahead_of_arrival_is_a_quarantine_reason_after_the_arrival_time_checks():
    reasons = list(QUARANTINE_REASONS)
    assert reasons.index("arrival_time_in_future") < reasons.index("event_time_ahead_of_arrival")
    assert reasons.index("event_time_ahead_of_arrival") < reasons.index("missing_value")


@pytest.mark.parametrize(
    ("path", "te", "tp", "delimiter", "header", "time_format"),
    [
        (
            "samples/ooo-iot-d1.csv",
            "S.Client.Detection.Time",
            "S.Message.received.time.ms",
            ";",
            True,
            "epoch_ms",
        ),
        (
            "samples/ooo-iot-d2.csv",
            "S.Client.Detection.Time",
            "S.Message.received.time.ms",
            ";",
            True,
            "epoch_ms",
        ),
        ("samples/debs2015-taxi-sample.csv", "2", "3", ",", False, "iso"),
    ],
)
def test_no_record_of_a_bundled_stream_trips_the_default_skew_bound(
    path, te, tp, delimiter, header, time_format
):
    stream = read_stream(
        path, event_time=te, arrival_time=tp, delimiter=delimiter, header=header, time_format=time_format
    )
    ahead = int((stream.te_ms - stream.tp_ms).max())
    assert ahead <= 0 < DEFAULT_MAX_EVENT_AHEAD_MS  # 0 ms at most (the taxi sample), the default 5 min


def test_no_record_of_a_synthetic_stream_trips_the_default_skew_bound():
    for seed in range(3):
        stream = generate(seed=seed)
        assert int((stream.te_ms - stream.tp_ms).max()) <= 0


@pytest.mark.parametrize("value", [-1, 86_400_001])
def test_the_skew_bound_is_range_checked(tmp_path, capsys, value):
    config = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1_000})
    with pytest.raises(ValueError, match="--max-event-ahead-ms must be between 0 and 86400000"):
        JobOptions(input="in", output="out", checkpoint="ck", config=config, max_event_ahead_ms=value)
    argv = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    argv += ["--checkpoint", str(tmp_path / "ck"), "--metrics-port", "0", "--max-event-ahead-ms", str(value)]
    assert main(argv) == 2
    assert "--max-event-ahead-ms must be between 0 and 86400000" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()  # refused before the checkpoint's application id is made
