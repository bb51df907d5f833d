"""The sources' seam (jobs/stream/sources/kinds.py): the job asks a source's kind, never its name."""

import argparse
import re
from pathlib import Path

import pytest

from jobs.stream.flag_checks import check_source_flags
from jobs.stream.options import FORMATS
from jobs.stream.sources.kinds import SOURCES, source_kind

ROOT = Path(__file__).resolve().parents[5]


def args(**given) -> argparse.Namespace:
    flags = {"format": "json", "input": None, "kafka_bootstrap_servers": None, "topic": None}
    flags |= {"kafka_option": [], "trigger": "available-now"}
    return argparse.Namespace(**(flags | given))


def test_the_command_line_offers_every_registered_source():
    assert FORMATS == tuple(SOURCES) == ("json", "csv", "parquet", "rate", "kafka")


def test_each_source_is_read_by_the_module_its_kind_names_and_nothing_else_branches_on_it():
    """A source is its reader module and its kind: the stream and a batch's input come from the module."""
    import inspect

    readers = {name: kind.reading() for name, kind in SOURCES.items()}
    assert {name: r.__name__ for name, r in readers.items()} == {
        "json": "jobs.stream.sources.landing",
        "csv": "jobs.stream.sources.landing",
        "parquet": "jobs.stream.sources.landing",
        "rate": "jobs.stream.sources.rate_source",
        "kafka": "jobs.stream.sources.kafka_topic",
    }
    for reader in readers.values():
        for name, params in [
            ("open_stream", ["spark", "options"]),
            ("batch_files", ["batch", "batch_id", "options"]),
        ]:
            assert list(inspect.signature(getattr(reader, name)).parameters) == params, (reader, name)
    # The job opens the stream and a batch's input through the kind alone.
    run = (ROOT / "jobs" / "stream" / "run.py").read_text()
    batch_input = (ROOT / "jobs" / "stream" / "sources" / "batch_input.py").read_text()
    assert "options.source.reading().open_stream(spark, options.source_options)" in run
    assert "self._reader.batch_files(batch, batch_id, self.options)" in batch_input


def test_no_module_outside_the_sources_tests_the_format_by_name():
    tests = re.compile(r"""\b(options|opts|args|self)\.format\s*(==|!=|in\b|not in\b)""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "jobs").rglob("*.py")
        if "sources" not in path.relative_to(ROOT / "jobs").parts
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if tests.search(line)
    ]
    assert not found, found


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"format": "csv"}, "--input is required with --format csv"),
        ({"format": "kafka", "input": "in"}, "--format kafka reads no --input"),
        ({"format": "kafka", "topic": "t"}, "--format kafka needs --kafka-bootstrap-servers"),
        ({"format": "json", "input": "in", "topic": "t"}, "are for --format kafka"),
        ({"format": "rate"}, "--format rate never runs out of input"),
    ],
)
def test_each_source_refuses_the_flags_that_do_not_fit_it(given, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_source_flags(args(**given))


def test_the_flags_each_source_needs_pass():
    check_source_flags(args(format="parquet", input="in"))
    check_source_flags(args(format="kafka", kafka_bootstrap_servers="h:9092", topic="t"))
    check_source_flags(args(format="rate", trigger="interval=1 second"))


def test_what_a_record_key_means_and_the_default_mode_come_from_the_kind():
    def traits(name):
        kind = source_kind(name)
        return kind.offset_keys, kind.default_partition_mode, kind.partition_per_task

    assert traits("kafka") == (True, "scoped", True)
    assert traits("json") == (False, "min", False)
    assert [k.name for k in SOURCES.values() if k.landing_files] == ["json", "csv", "parquet"]
