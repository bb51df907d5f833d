"""The streaming job's settings without Spark: trigger intervals, the checkpoint's Delta application id
(the job itself: tests/integration/spark/test_stream.py)."""

import pytest


@pytest.mark.parametrize(
    ("trigger", "ms"),
    [
        ("interval=1s", 1_000),
        ("interval=500ms", 500),
        ("interval=2 seconds", 2_000),
        ("interval=1.5min", 90_000),
    ],
)
def test_a_trigger_interval_takes_a_compact_or_spelled_out_duration(trigger, ms):
    from jobs.stream.options import trigger_interval_ms

    assert trigger_interval_ms(trigger) == ms


@pytest.mark.parametrize(
    "trigger", ["interval=", "interval=5", "interval=5 fortnights", "interval=0s", "every=5s"]
)
def test_a_bad_trigger_is_a_clear_error(trigger):
    from jobs.stream.options import trigger_interval_ms

    with pytest.raises(ValueError, match="--trigger"):
        trigger_interval_ms(trigger)


def test_a_new_checkpoint_gets_its_own_delta_application_id_and_refuses_tables_of_another(tmp_path):
    from jobs.stream.checkpoint.state import checkpoint_app_id

    out = tmp_path / "out"
    first = checkpoint_app_id(str(tmp_path / "ck1"), str(out))
    assert first.startswith("jobs.stream-") and first == checkpoint_app_id(str(tmp_path / "ck1"), str(out))
    assert checkpoint_app_id(str(tmp_path / "ck2"), str(tmp_path / "other")) != first
    # Tables written (from ck1) meet a fresh checkpoint: refused with what to do, never batches skipped.
    log = out / "aggregates" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{}\n")
    with pytest.raises(ValueError, match="restart with the checkpoint that wrote them, or write to a new"):
        checkpoint_app_id(str(tmp_path / "ck3"), str(out))
    assert checkpoint_app_id(str(tmp_path / "ck1"), str(out)) == first  # its own checkpoint goes on
    # A checkpoint from before the id file (query offsets, no app-id) keeps the id it wrote with.
    legacy = tmp_path / "ck4"
    (legacy / "query" / "offsets").mkdir(parents=True)
    (legacy / "query" / "offsets" / "0").write_text("v1\n")
    assert checkpoint_app_id(str(legacy), str(out)) == "jobs.stream"


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--future-bound-ms", "0", "--future-bound-ms must be between 1000 and 31536000000, got 0"),
        ("--future-bound-ms", "-5", "--future-bound-ms must be between 1000 and 31536000000, got -5"),
        # near 2**63 Spark's _ingest_ms + bound overflowed in every batch, on every restart
        ("--future-bound-ms", str(2**63 - 1), "--future-bound-ms must be between 1000 and 31536000000"),
        ("--max-field-bytes", "0", "--max-field-bytes must be between 64 and 67108864, got 0"),
        ("--max-field-bytes", str(2**40), "--max-field-bytes must be between 64 and 67108864"),
    ],
)
def test_an_out_of_range_validation_bound_is_one_error_line_and_exit_2_before_anything(
    tmp_path, capsys, flag, value, needle
):
    from jobs.stream.cli import main

    argv = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    argv += ["--checkpoint", str(tmp_path / "ck"), "--config", str(tmp_path / "wm.json")]
    (tmp_path / "in").mkdir()
    assert main([*argv, "--metrics-port", "0", flag, value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: {needle}") and captured.err.count("\n") == 1, captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no checkpoint, table or config written


def test_the_validation_bounds_at_their_limits_reach_the_job_options(tmp_path):
    from jobs.stream.cli import FUTURE_BOUND_RANGE_MS, MAX_FIELD_BYTES_RANGE, build_parser, options_from_args

    (tmp_path / "in").mkdir()
    for bound, size in zip(FUTURE_BOUND_RANGE_MS, MAX_FIELD_BYTES_RANGE, strict=True):
        run = tmp_path / str(bound)
        argv = ["--input", str(tmp_path / "in"), "--output", str(run / "out")]
        argv += ["--checkpoint", str(run / "ck")]
        argv += ["--future-bound-ms", str(bound), "--max-field-bytes", str(size)]
        options = options_from_args(build_parser().parse_args(argv))
        assert (options.future_bound_ms, options.max_field_bytes) == (bound, size)


def job_places(tmp_path):
    """The job's --input (created), --output and --checkpoint under ``tmp_path``."""
    (tmp_path / "in").mkdir()
    return [
        f"--{flag}={tmp_path / name}"
        for flag, name in (("input", "in"), ("output", "out"), ("checkpoint", "ck"))
    ]


@pytest.mark.parametrize(("value", "want"), [(None, 3_600_000), ("7200000", 7_200_000), ("none", None)])
def test_the_partition_retention_flag_reaches_the_configuration(tmp_path, value, want):
    from jobs.stream.cli import build_parser, options_from_args

    argv = job_places(tmp_path)
    if value is not None:
        argv += ["--partition-retention-ms", value]
    options = options_from_args(build_parser().parse_args([*argv, "--window-ms", "1000"]))
    assert options.config.partition_retention_ms == want


def test_a_bad_partition_retention_is_one_error_line_and_exit_2(tmp_path, capsys):
    from jobs.stream.cli import main

    argv = job_places(tmp_path)
    assert main([*argv, "--metrics-port", "0", "--partition-retention-ms", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: --partition-retention-ms must be a number of milliseconds or none, got 'soon'"
    )


def test_a_missing_input_folder_is_one_error_line_and_exit_2_before_anything(tmp_path, capsys):
    """It used to be created, and the run exit 0 with no event and a summary naming tables never made."""
    from jobs.stream.cli import main

    argv = ["--input", str(tmp_path / "typo"), "--output", str(tmp_path / "out")]
    argv += ["--checkpoint", str(tmp_path / "ck"), "--config", str(tmp_path / "wm.json")]
    assert main([*argv, "--metrics-port", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    needle = f"error: --input {tmp_path / 'typo'}: no such folder; create it (mkdir -p {tmp_path / 'typo'})"
    assert captured.err.startswith(needle) and captured.err.count("\n") == 1, captured.err
    assert list(tmp_path.iterdir()) == []  # no input folder, checkpoint, table or config written
    (tmp_path / "typo").write_text("")  # a file is not a landing folder either
    assert main([*argv, "--metrics-port", "0"]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_the_summary_names_the_landing_files_an_available_now_run_never_planned(tmp_path, caplog):
    from jobs.stream.cli import unplanned_summary
    from jobs.stream.options import JobOptions
    from watermark.config import PipelineConfig

    config = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1_000})
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "old.json").write_text("{}\n")  # no source log lists it
    places = dict(input=str(tmp_path / "in"), output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ck"))
    options = JobOptions(**places, config=config)
    with caplog.at_level("WARNING", logger="jobs.stream"):
        summary = unplanned_summary(options)
    assert summary == {"unplanned_files": 1, "unplanned": [f"{tmp_path}/in/old.json"]}
    assert "old.json was never planned by the file source" in caplog.text
    assert unplanned_summary(JobOptions(**places, config=config, max_batches=1)) == {}  # files to go
    assert unplanned_summary(JobOptions(**places, config=config, trigger="interval=1s")) == {}
