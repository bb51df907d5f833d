"""The suite's cost report (tests/suite_costs.py): the process tree's CPU, the report, the budget's verdicts,
the schedule, and the per-file budgets written from a report."""

import json
import subprocess
import sys
import textwrap
import time

from tests import suite_costs

#: A child that burns ``SECONDS`` of its own CPU, says so, then waits for its standard input to close.
BURN = textwrap.dedent(
    """
    import sys, time
    while time.process_time() < float(sys.argv[1]):
        pass
    print("burnt", flush=True)
    sys.stdin.read()
    """
)


def test_the_tree_cpu_counts_a_live_child_and_then_what_it_left_once_reaped():
    before = suite_costs.tree_cpu_s()
    child = subprocess.Popen(
        [sys.executable, "-c", BURN, "0.4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "burnt"
    alive = suite_costs.tree_cpu_s()
    assert alive - before >= 0.35  # the child's 0.4 s, while it runs (read in clock ticks)
    child.stdin.close()
    child.wait()
    assert suite_costs.tree_cpu_s() - before >= 0.35  # reaped: it is in this process's children's times


#: A child that starts a grandchild burning ``SECONDS`` of CPU, prints its pid, and exits when its
#: standard input closes: the grandchild is then an orphan, as the JVM of a job process a test SIGKILLs.
ORPHAN = textwrap.dedent(
    """
    import os, sys, time
    pid = os.fork()
    if pid == 0:
        os.close(1)
        while time.process_time() < float(sys.argv[1]):
            pass
        os._exit(0)
    print(pid, flush=True)
    sys.stdin.read()
    """
)


def test_an_orphan_below_the_worker_is_adopted_and_its_cpu_counted_once_it_exits():
    assert suite_costs.become_subreaper()
    sampler = suite_costs.Sampler()
    try:
        before = suite_costs.tree_cpu_s()
        parent = subprocess.Popen(
            [sys.executable, "-c", ORPHAN, "0.4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        orphan = int(parent.stdout.readline())
        sampler.poll()  # seen below its own parent
        parent.stdin.close()
        parent.wait()
        while suite_costs.psutil.pid_exists(orphan):  # adopted; reaped by the sampler once it exits
            sampler.poll()
            time.sleep(0.05)
        assert suite_costs.tree_cpu_s() - before >= 0.35  # the orphan's 0.4 s, in this process's children's
    finally:
        sampler.stop()


#: A child that says it started, then waits for its standard input to close.
WAIT = "import sys; print('up', flush=True); sys.stdin.read()"


def test_the_sampler_counts_a_job_process_into_the_counter_in_force_once():
    sampler = suite_costs.Sampler()
    try:
        counts: dict[str, int] = {}
        sampler.count_into(counts)
        # its command line is a job's (python ... -m jobs.stream); what it runs is WAIT
        child = subprocess.Popen(
            [sys.executable, "-c", WAIT, "-m", "jobs.stream"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert child.stdout.readline() == b"up\n"
            sampler.poll()
            sampler.poll()  # seen twice: counted once
            after = sampler.count_into(None)
            sampler.poll()
        finally:
            child.stdin.close()
            child.wait()
    finally:
        sampler.stop()
    assert after is counts and counts == {"jobs": 1}


def test_jvms_and_jobs_are_told_from_their_command_lines():
    assert suite_costs.classify("java", ["java", "-cp", "x", "kafka.Kafka"]) == "jvm"
    assert suite_costs.classify("python", ["python", "-m", "jobs.batch.backfill", "t"]) == "job"
    assert suite_costs.classify("python", ["python", "-m", "pytest", "jobs/"]) is None


def records(tests: dict, shared: dict | None = None) -> list[dict]:
    return [{"tests": tests, "shared": shared or {}, "worker_cpu_s": 1_000.0, "worker_wall_s": 10.0}]


def cost(cpu: float, wall: float = 1.0, jvms: int = 0, jobs: int = 0) -> dict:
    return {"cpu_s": cpu, "wall_s": wall, "jvms": jvms, "jobs": jobs}


def test_the_report_sums_tests_into_files_tiers_and_the_total_with_the_shared_set_up_apart():
    report = suite_costs.build_report(
        records(
            {
                "tests/unit/test_a.py::test_1": cost(2.0),
                "tests/unit/test_a.py::test_2": cost(3.0),
                "tests/integration/kafka/test_k.py::test_1": cost(40.0, jvms=1, jobs=2),
                "watermark/tuning/tune.py::watermark.tuning.tune.choose": cost(0.5),
            },
            {"spark session": cost(30.0, jvms=1)},
        ),
        whole=True,
        fast=False,
        wall_s=100.0,
    )
    assert (
        report["files"]["unit/test_a.py"]["cpu_s"] == 5.0 and report["files"]["unit/test_a.py"]["tests"] == 2
    )
    assert report["tiers"]["integration/kafka"] == {
        "files": 1, "tests": 1, "wall_s": 1.0, "cpu_s": 40.0, "jvms": 1, "jobs": 2,
    }  # fmt: skip
    assert report["tiers"]["doctest"]["cpu_s"] == 0.5
    assert report["shared_cpu_s"] == 30.0 and report["cpu_s"] == 75.5
    assert report["other_cpu_s"] == 1_000.0 - 75.5


def test_over_budget_and_growth_are_said_loudly_and_never_as_a_failure():
    report = suite_costs.build_report(
        records({"tests/unit/test_a.py::t": cost(50.0), "tests/system/test_s.py::t": cost(10.0)}),
        whole=True,
        fast=False,
        wall_s=60.0,
    )
    budget = {"total_cpu_s": 40, "tiers": {"unit": 20, "system": 100}, "defaults": {"system": 60}}
    previous = {"commit": "abc", "files": {"unit/test_a.py": {"cpu_s": 20.0, "tests": 1}}}
    lines = suite_costs.render(report, budget, previous, suite_costs.REPORT)
    text = "\n".join(lines)
    assert "!!! OVER BUDGET" in text
    assert "!!!   the suite: 60 CPU s, budget 40" in text
    assert "!!!   tier unit: 50 CPU s, budget 20" in text
    assert "tier system" not in text  # within its tier budget and its file default
    assert "!!!   unit/test_a.py: 20 -> 50 CPU s (+30)" in text
    # a small rise is no growth
    assert suite_costs.growth(report, {"files": {"unit/test_a.py": {"cpu_s": 48.0, "tests": 1}}}) == []


def test_a_part_of_the_suite_is_compared_file_by_file_only():
    report = suite_costs.build_report(
        records({"tests/unit/test_a.py::t": cost(50.0)}), whole=False, fast=False, wall_s=60.0
    )
    text = "\n".join(
        suite_costs.render(report, {"total_cpu_s": 1, "tiers": {"unit": 1}}, None, suite_costs.REPORT)
    )
    assert "the suite:" not in text and "tier unit" not in text


def test_the_schedule_comes_from_the_last_report_else_from_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(suite_costs, "REPORT", tmp_path / "suite-costs.json")
    budget = tmp_path / "budget.toml"
    budget.write_text('total_cpu_s = 10\n[files]\n"unit/test_b.py" = 50\n"system/test_c.py" = 300\n')
    monkeypatch.setattr(suite_costs, "BUDGET", budget)
    assert suite_costs.schedule() == ["system/test_c.py", "unit/test_b.py"]  # a fresh clone: the budget's
    files = {
        "unit/test_b.py": {"wall_s": 90.0},
        "system/test_c.py": {"wall_s": 20.0},
        "unit/test_tiny.py": {"wall_s": 1.0},
        "doctest:watermark/tuning/tune.py": {"wall_s": 30.0},
    }
    suite_costs.REPORT.write_text(json.dumps({"files": files}))
    assert suite_costs.schedule() == ["unit/test_b.py", "system/test_c.py"]  # the report's wall times
    # a fresh clone whose budget file has the [schedule] of a report: its wall times, not [files]' CPU
    suite_costs.REPORT.unlink()
    budget.write_text(budget.read_text() + '[schedule]\n"unit/test_b.py" = 90\n"system/test_c.py" = 20\n')
    assert suite_costs.schedule() == ["unit/test_b.py", "system/test_c.py"]


def test_the_file_budgets_are_written_from_a_report_and_the_hand_written_part_is_kept(tmp_path):
    budget = tmp_path / "budget.toml"
    budget.write_text('# hand\ntotal_cpu_s = 1500\n[tiers]\nunit = 100\n\n[files]\n"old.py" = 1\n')
    report = {
        "commit": "abc",
        "files": {
            "unit/test_a.py": {"cpu_s": 40.0, "wall_s": 60.0},
            "unit/test_small.py": {"cpu_s": 2.0, "wall_s": 3.0},
            "doctest:watermark/tuning/tune.py": {"cpu_s": 20.0, "wall_s": 20.0},
        },
    }
    suite_costs.write_file_budgets(report, budget)
    read = suite_costs.read_budget(budget)
    assert read["total_cpu_s"] == 1500 and read["tiers"] == {"unit": 100}
    assert read["files"] == {"unit/test_a.py": 55}  # 40 s with 30 % headroom, rounded up to 5 s
    assert read["schedule"] == {"unit/test_a.py": 60}  # the wall times a fresh clone's order comes from
    assert suite_costs.file_budget(read, "unit/test_a.py", "unit") == 55
    # a tier over its budget: each file gets its share of the tier's budget
    over = {"files": {"unit/test_a.py": {"cpu_s": 300.0}, "unit/test_b.py": {"cpu_s": 100.0}}}
    assert suite_costs.budget_from_report(over, {"unit": 100}) == {"unit/test_a.py": 75, "unit/test_b.py": 25}
    assert suite_costs.file_budget(read, "unit/test_new.py", "unit") is None
