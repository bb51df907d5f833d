"""The ``spark`` fixture hands each test a working session, whatever the test before it on the worker did:
stopped the session, was interrupted by pytest-timeout in the middle of a Spark job, or lost the JVM. The
tests run in this order, on one worker (``--dist loadfile``)."""

import os
import signal

import pytest


def test_a_test_may_stop_the_session(spark):
    spark.stop()


def test_the_next_test_gets_a_working_session_after_a_stop(spark):
    assert spark.range(3).count() == 3


@pytest.mark.xfail(strict=True, reason="pytest-timeout interrupts it, as it would a test that hangs")
@pytest.mark.timeout(20)
def test_a_test_may_time_out_in_the_middle_of_a_spark_job(spark):
    spark.range(10**13).selectExpr("sum(id % 7)").collect()  # hours of work


def test_the_next_test_gets_a_working_session_with_nothing_left_running(spark):
    assert spark.range(3).count() == 3
    assert not spark.streams.active


def test_a_test_may_lose_the_jvm(spark):
    jvm = spark.sparkContext._gateway.proc
    os.kill(jvm.pid, signal.SIGKILL)
    jvm.wait()


def test_the_next_test_gets_a_working_session_in_a_new_jvm(spark):
    assert spark.range(3).count() == 3
    assert spark.sparkContext._gateway.proc.poll() is None
