"""The parts of JobOptions each stage takes: each field the JobOptions field of its name, and their logic."""

from dataclasses import fields, replace

import pytest

from jobs.stream.options import Fields, JobOptions, KafkaOptions, RateOptions
from jobs.stream.sinks.sink_options import DeferPolicy, SinkOptions
from jobs.stream.sources.record_rules import RecordRules
from jobs.stream.sources.source_options import SourceOptions
from jobs.stream.stage.stage_options import StageOptions
from watermark.config import PipelineConfig

CONFIG = PipelineConfig.from_dict(
    {"version": 1, "strategy": "periodic", "params": {"delay_ms": 100}, "window_ms": 1_000}
)


def options(**changes):
    """JobOptions with every field a part takes away from its default."""
    given = {
        "input": "in",
        "output": "out",
        "checkpoint": "ck",
        "config": CONFIG,
        "config_path": "cfg.json",
        "format": "kafka",
        "rate": RateOptions(keys=7),
        "kafka": KafkaOptions(bootstrap_servers="b:9092", topic="t"),
        "trigger": "interval=1s",
        "max_files_per_trigger": 3,
        "fields": Fields(key="k"),
        "future_bound_ms": 1_000,
        "max_field_bytes": 2_048,
        "max_event_ahead_ms": 5,
        "max_arrival_ahead_ms": 7,
        "max_record_bytes": 4_096,
        "reader": "spark",
        "app_id": "app",
        "arrival_history": False,
        "dedup_horizon_ms": 60_000,
        "stage_in": "driver",
        "clock": "wall",
        "clock_margin_ms": 250,
        "defer": DeferPolicy(batches=2),
    }
    return JobOptions(**{**given, **changes})


@pytest.mark.parametrize(
    ("part", "kind"),
    [
        ("record_rules", RecordRules),
        ("source_options", SourceOptions),
        ("stage_options", StageOptions),
        ("sink_options", SinkOptions),
    ],
)
def test_each_field_of_a_part_is_the_job_options_field_of_its_name(part, kind):
    job = options()
    built = getattr(job, part)
    assert type(built) is kind
    for f in fields(kind):
        if f.name == "record_rules":
            assert built.record_rules == job.record_rules
        elif f.name == "timer":
            assert built.timer is job.timer is True  # wall clock, Kafka, an interval trigger
        else:
            assert getattr(built, f.name) == getattr(job, f.name), f.name


def test_the_parts_follow_a_replaced_field():
    job = replace(options(), app_id="other", clock="arrivals")
    assert job.sink_options.app_id == "other"
    assert job.stage_options.clock == "arrivals" and not job.source_options.timer


def test_the_stage_boundary_is_the_batch_start_less_the_margin_on_the_wall_clock_only():
    assert options().stage_options.boundary_ms(10_000) == 9_750
    assert options(clock="arrivals").stage_options.boundary_ms(10_000) is None


def test_the_source_kind_and_fields_of_the_parts():
    job = options()
    assert job.source_options.source is job.stage_options.source is job.source
    assert job.source_options.fields == Fields(key="k")
