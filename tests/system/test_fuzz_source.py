"""Fuzz (hypothesis): arbitrary file names, bytes and field values through the job's source and validation.

The job never fails, and every input record ends in exactly one table (``benchmarks/fuzz_source.py`` holds
the check, and runs it longer). A few examples here keep the suite under a minute for this test.
"""

import os
import shutil

from hypothesis import HealthCheck, given, settings

from benchmarks.fuzz_source import LandedFile, cases, check

EXAMPLES = int(os.environ.get("FUZZ_SOURCE_EXAMPLES", "3"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(files=cases())
def test_arbitrary_names_bytes_and_values_never_fail_the_job_and_each_record_lands_once(
    spark, tmp_path_factory, files
):
    root = tmp_path_factory.mktemp("fuzz")
    try:
        check(spark, root, files)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_folder_of_every_kind_of_name_and_line_is_accounted_for(spark, tmp_path):
    good = b'{"event_id":"e%d","key":"k","partition":"p","event_time_ms":1600000000%03d,"value":1}'
    files = [
        LandedFile("fqm?.json", (good % (1, 1), b"", b"\xff\xfe", b'{"event_id":"x"}')),
        LandedFile("fb[1]{a}*.json", (good % (2, 2), b" ", good % (3, 3))),
        LandedFile("fb1a.json", (good % (4, 4),)),
        LandedFile("fc:d.json", (good % (5, 5),)),
        LandedFile("f%41 é#.json", (b'{"event_id":"u","key":"a\xc3","event_time_ms":1600000000000}',)),
    ]
    outcome = check(spark, tmp_path, files)
    # Blank lines are not records; the colon's file is one quarantine row; invalid UTF-8 comes first.
    assert outcome.records == 7 and outcome.counted == 4
    assert outcome.reasons == {"bad_encoding": 2, "missing_key": 1, "unreadable_file_name": 1}
