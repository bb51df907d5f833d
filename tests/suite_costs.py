"""What each test costs, summed over the worker's whole process tree, and the suite's budget.

A pytest plugin (``tests/conftest.py`` loads it). For every test it measures, from its setup to its
teardown:

- **wall** seconds;
- **cpu** seconds of the worker process and of every process below it (the worker's Spark JVM, the jobs,
  brokers and servers its tests start, and the processes those start): user and system time of the live
  processes plus what their exited children left in their ``cutime``/``cstime``, before and after (the
  worker is its descendants' subreaper: the JVM of a job process a test SIGKILLs stays in the tree);
- **jvms**: the Java processes that appeared below the worker while the test ran (a sampler thread looks
  every half second; a JVM lives seconds at least);
- **jobs**: the job runs it made: streaming queries and backfills run in the test's process, and job
  processes (``python -m jobs.…``, ``awm …``) seen below the worker.

Set-up shared by a worker's tests (its Spark session, the run's Kafka broker, S3 server, cluster, Airflow
home) is measured apart, under ``shared``, so that a file's cost does not depend on whether it happened to
be the first on its worker to need one.

At the end of a run of the whole suite ``bin/test`` gets a report, ``out/suite-costs.json`` (the one before
it is kept as ``out/suite-costs.previous.json``), and a table in the terminal: CPU per tier against the
budget of ``tests/budget.toml``, the costliest files, what is over budget and which file grew since the last
report. It never fails a run on a time: the machine is shared. A run of part of the suite writes
``out/suite-costs-partial.json`` (``--fast``: ``out/suite-costs-fast.json``) and compares files only.

``python -m tests.suite_costs`` prints the last report again; ``--budget`` rewrites the per-file part of
``tests/budget.toml`` from it (the tier and total budgets are written by hand).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
OUT = ROOT / "out"
REPORT = OUT / "suite-costs.json"
PREVIOUS = OUT / "suite-costs.previous.json"
BUDGET = TESTS / "budget.toml"

#: A file grew if its CPU rose by more than this share and this many seconds since the last report.
GROWTH_SHARE = 0.15
GROWTH_MIN_S = 5.0
#: The sampler's period (s): how often the worker's process tree is read for new JVMs and job processes.
SAMPLE_PERIOD_S = 0.5
#: Files that take at least this long (s) are handed out first, the longest first.
SCHEDULE_MIN_S = 5.0


# ------------------------------------------------------------------------------------------------------
# Measuring a process tree


def tree_cpu_s(root: psutil.Process | None = None) -> float:
    """CPU seconds used so far by ``root`` (this process) and every live process below it, with what their
    exited (reaped) children left them."""
    root = root or psutil.Process()
    total = 0.0
    for proc in [root, *_children(root)]:
        try:
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _children(root: psutil.Process) -> list[psutil.Process]:
    try:
        return root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def classify(name: str, cmdline: list[str]) -> str | None:
    """``"jvm"`` for a Java process, ``"job"`` for a job's process (``python -m jobs.…``, ``awm``), else None.

    >>> classify("java", ["/usr/bin/java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit"])
    'jvm'
    >>> classify("python", ["python", "-m", "jobs.stream", "--input", "in"])
    'job'
    >>> classify("awm", [".venv/bin/python", ".venv/bin/awm", "backfill", "tables"])
    'job'
    >>> classify("python", ["python", "-c", "print(1)"]) is None
    True
    """
    if name == "java":
        return "jvm"
    words = cmdline[:6]
    for i, word in enumerate(words[:-1]):
        if word == "-m" and words[i + 1].startswith("jobs."):
            return "job"
    if any(os.path.basename(w) == "awm" for w in words[:2]):
        return "job"
    return None


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux ``PR_SET_CHILD_SUBREAPER``): an orphan
    below it is re-parented to it, not to init. Returns whether that was done (False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        return False


class Sampler:
    """A thread that reads the worker's process tree every :data:`SAMPLE_PERIOD_S` and counts the JVMs and
    job processes that appear, into the counter in force (a test's, or a shared set-up's).

    The worker is made its descendants' subreaper (:func:`become_subreaper`): a process whose parent dies
    first (the JVM of a job process a test SIGKILLs) stays in the worker's tree instead of going to init,
    so its CPU is counted. The sampler reaps such an adopted process when it exits (its CPU then goes to
    the worker's children's time); a process first seen as the worker's own child is never reaped here:
    whoever started it (``subprocess``, ``multiprocessing``) waits for it.
    """

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.seen: set[tuple[int, float]] = set()
        #: every process seen below the worker -> whether its parent was then another process than the worker
        self.adoptable: dict[tuple[int, float], bool] = {}
        self.counts: dict[str, int] | None = None
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.seen.update(self._tree())  # what runs before the first test is no test's
        self.thread = threading.Thread(target=self._run, name="suite-costs-sampler", daemon=True)
        self.thread.start()

    def _tree(self) -> dict[tuple[int, float], str]:
        found = {}
        for proc in _children(self.me):
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    ppid = proc.ppid()
                    if key not in self.adoptable:
                        self.adoptable[key] = ppid != self.me.pid
                    if ppid == self.me.pid and self.adoptable[key] and proc.status() == psutil.STATUS_ZOMBIE:
                        self._reap(proc.pid)
                        continue
                    kind = classify(proc.name(), proc.cmdline())
                    if kind is not None:
                        found[key] = kind
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    @staticmethod
    def _reap(pid: int) -> None:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)

    def poll(self) -> None:
        tree = self._tree()
        with self.lock:
            for key, kind in tree.items():
                if key not in self.seen:
                    self.seen.add(key)
                    if self.counts is not None:
                        self.counts[kind + "s"] = self.counts.get(kind + "s", 0) + 1

    def _run(self) -> None:
        while not self.stopped.wait(SAMPLE_PERIOD_S):
            with contextlib.suppress(Exception):
                self.poll()

    def count_into(self, counts: dict[str, int] | None) -> dict[str, int] | None:
        """Count from now into ``counts`` (after a last look for the previous one); returns the previous."""
        self.poll()
        with self.lock:
            previous, self.counts = self.counts, counts
        return previous

    def stop(self) -> None:
        self.stopped.set()


# ------------------------------------------------------------------------------------------------------
# The worker's records


@dataclass
class Cost:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    jvms: int = 0
    jobs: int = 0

    def add(self, other: Cost) -> None:
        self.wall_s += other.wall_s
        self.cpu_s += other.cpu_s
        self.jvms += other.jvms
        self.jobs += other.jobs


@dataclass
class Recorder:
    """One process's measurements: its tests' costs and its shared set-up's."""

    tests: dict[str, dict] = field(default_factory=dict)
    shared: dict[str, Cost] = field(default_factory=dict)
    sampler: Sampler | None = None
    #: the shared set-up being measured (outermost only) and the cost it takes out of the test around it
    depth: int = 0
    taken: Cost = field(default_factory=Cost)
    #: the job runs made in this process during the current test
    in_process_jobs: int = 0
    started: float = field(default_factory=time.monotonic)
    cpu_at_start: float = 0.0

    @contextlib.contextmanager
    def shared_setup(self, name: str) -> Iterator[None]:
        """Measure what runs inside apart from the test around it, under ``shared[name]``."""
        if self.depth or self.sampler is None:
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
            return
        self.depth += 1
        counts: dict[str, int] = {}
        outer = self.sampler.count_into(counts)
        wall, cpu = time.monotonic(), tree_cpu_s()
        try:
            yield
        finally:
            cost = Cost(time.monotonic() - wall, tree_cpu_s() - cpu)
            self.sampler.count_into(outer)
            cost.jvms, cost.jobs = counts.get("jvms", 0), counts.get("jobs", 0)
            self.shared.setdefault(name, Cost()).add(cost)
            self.taken.add(cost)
            self.depth -= 1


RECORDER = Recorder()


def shared_setup(name: str) -> contextlib.AbstractContextManager[None]:
    """For fixtures and helpers: measure a set-up shared by many tests apart from the test that pays it."""
    return RECORDER.shared_setup(name)


def count_job_run() -> None:
    """A job run made in this process (a streaming query, a backfill)."""
    RECORDER.in_process_jobs += 1


def _instrument_job_runs() -> None:
    """Count the job runs made in the test's process: every streaming query goes through
    ``jobs.stream.run._run_query``, every backfill through ``jobs.batch.backfill.run_backfill``'s body."""
    import importlib

    for module_name, function in (("jobs.stream.run", "_run_query"), ("jobs.batch.backfill", "run_backfill")):
        module = importlib.import_module(module_name)
        original = getattr(module, function)
        if getattr(original, "_counted", False):
            continue

        def counted(*args, __original=original, **kwargs):
            count_job_run()
            return __original(*args, **kwargs)

        counted._counted = True  # type: ignore[attr-defined]
        counted.__wrapped__ = original  # type: ignore[attr-defined]
        counted.__doc__ = original.__doc__
        setattr(module, function, counted)


# ------------------------------------------------------------------------------------------------------
# Where a test belongs


def file_of(nodeid: str) -> str:
    """The test's file relative to ``tests/`` (``unit/test_x.py``), or the module of a doctest.

    >>> file_of("tests/unit/watermark/tuning/test_tune.py::test_a[x]")
    'unit/watermark/tuning/test_tune.py'
    >>> file_of("watermark/tuning/tune.py::watermark.tuning.tune.choose")
    'doctest:watermark/tuning/tune.py'
    """
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/"):
        return path[len("tests/") :]
    return "doctest:" + path


def tier_of(file: str) -> str:
    """``unit``, ``integration/<component>``, ``system`` or ``doctest``.

    >>> [tier_of(f) for f in ("unit/test_a.py", "integration/kafka/test_b.py", "system/test_c.py")]
    ['unit', 'integration/kafka', 'system']
    >>> tier_of("doctest:watermark/tuning/tune.py")
    'doctest'
    """
    if file.startswith("doctest:"):
        return "doctest"
    parts = file.split("/")
    if parts[0] == "integration" and len(parts) > 2:
        return "integration/" + parts[1]
    return parts[0] if len(parts) > 1 else "doctest"  # tests/*.py hold helpers and their doctests


# ------------------------------------------------------------------------------------------------------
# The hooks


def pytest_configure(config):
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        return  # the xdist controller runs no test: it gathers the workers' records
    become_subreaper()
    RECORDER.sampler = Sampler()
    RECORDER.cpu_at_start = tree_cpu_s()
    with contextlib.suppress(ImportError):
        _instrument_job_runs()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if RECORDER.sampler is None:
        return (yield)
    counts: dict[str, int] = {}
    RECORDER.sampler.count_into(counts)
    RECORDER.taken = Cost()
    RECORDER.in_process_jobs = 0
    wall, cpu = time.monotonic(), tree_cpu_s()
    try:
        return (yield)
    finally:
        cost = Cost(time.monotonic() - wall, tree_cpu_s() - cpu)
        RECORDER.sampler.count_into(None)
        cost.wall_s -= RECORDER.taken.wall_s
        cost.cpu_s -= RECORDER.taken.cpu_s
        cost.jvms = counts.get("jvms", 0)
        cost.jobs = counts.get("jobs", 0) + RECORDER.in_process_jobs
        RECORDER.tests[item.nodeid] = asdict(cost)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Session-scoped fixtures are shared set-up: measured apart from the test that first needs them."""
    if fixturedef.scope != "session" or RECORDER.sampler is None:
        return (yield)
    with RECORDER.shared_setup(f"fixture {fixturedef.argname}"):
        return (yield)


def _worker_records() -> dict:
    total = tree_cpu_s() - RECORDER.cpu_at_start
    return {
        "tests": RECORDER.tests,
        "shared": {k: asdict(v) for k, v in RECORDER.shared.items()},
        "worker_cpu_s": total,
        "worker_wall_s": time.monotonic() - RECORDER.started,
    }


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if RECORDER.sampler is not None:
        RECORDER.sampler.stop()
    if hasattr(config, "workerinput"):  # an xdist worker: its records go to the controller
        config.workeroutput["suite_costs"] = json.dumps(_worker_records())
        return
    if RECORDER.sampler is not None:  # no xdist: this process ran the tests
        _collected(config).append(_worker_records())


_RECORDS = pytest.StashKey[list]()


def _collected(config) -> list:
    if _RECORDS not in config.stash:
        config.stash[_RECORDS] = []
    return config.stash[_RECORDS]


def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {}).get("suite_costs")
    if output:
        _collected(node.config).append(json.loads(output))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    records = config.stash.get(_RECORDS, [])
    if not records or config.option.collectonly:
        return
    whole = _is_whole_suite(config)
    fast = bool(config.getoption("--fast", default=False))
    report = build_report(records, whole=whole and not fast, fast=fast, wall_s=_run_wall_s(config))
    target = (
        REPORT if report["whole"] else OUT / ("suite-costs-fast.json" if fast else "suite-costs-partial.json")
    )
    previous = read_report(target)
    OUT.mkdir(parents=True, exist_ok=True)
    if report["whole"] and previous is not None:
        PREVIOUS.write_text(json.dumps(previous, indent=1, sort_keys=True))
    target.write_text(json.dumps(report, indent=1, sort_keys=True))
    lines = render(report, read_budget(), previous, target)
    terminalreporter.write_sep("=", "suite costs")
    for line in lines:
        terminalreporter.write_line(line)


def _is_whole_suite(config) -> bool:
    narrowed = ("keyword", "markexpr", "lf", "deselect", "ignore", "ignore_glob")
    if any(getattr(config.option, name, None) for name in narrowed):
        return False
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS


_RUN_STARTED = time.monotonic()


def _run_wall_s(config) -> float:
    return time.monotonic() - _RUN_STARTED


# ------------------------------------------------------------------------------------------------------
# The report


def build_report(records: list[dict], whole: bool, fast: bool, wall_s: float) -> dict:
    """The run's report from the workers' records: every test, every file, every tier, the shared set-up."""
    tests: dict[str, dict] = {}
    shared: dict[str, Cost] = {}
    worker_cpu = 0.0
    for rec in records:
        tests.update(rec["tests"])
        for name, c in rec["shared"].items():
            shared.setdefault(name, Cost()).add(Cost(**c))
        worker_cpu += rec["worker_cpu_s"]
    files: dict[str, dict] = {}
    for nodeid, c in tests.items():
        f = file_of(nodeid)
        entry = files.setdefault(f, {"tier": tier_of(f), "tests": 0, **asdict(Cost())})
        entry["tests"] += 1
        for k in ("wall_s", "cpu_s", "jvms", "jobs"):
            entry[k] += c[k]
    tiers: dict[str, dict] = {}
    for e in files.values():
        t = tiers.setdefault(e["tier"], {"files": 0, "tests": 0, **asdict(Cost())})
        t["files"] += 1
        for k in ("tests", "wall_s", "cpu_s", "jvms", "jobs"):
            t[k] += e[k]
    shared_cpu = sum(c.cpu_s for c in shared.values())
    tests_cpu = sum(e["cpu_s"] for e in files.values())
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": _commit(),
        "whole": whole,
        "fast": fast,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(tests_cpu + shared_cpu, 1),
        "tests_cpu_s": round(tests_cpu, 1),
        "shared_cpu_s": round(shared_cpu, 1),
        #: the workers' CPU outside any test or shared set-up (collection, imports, the sampler)
        "other_cpu_s": round(max(0.0, worker_cpu - tests_cpu - shared_cpu), 1),
        "workers": len(records),
        "tiers": {k: _rounded(v) for k, v in sorted(tiers.items())},
        "files": {k: _rounded(v) for k, v in sorted(files.items())},
        "shared": {k: _rounded(asdict(v)) for k, v in sorted(shared.items())},
        "tests": {k: _rounded(v) for k, v in sorted(tests.items())},
    }


def _rounded(d: dict) -> dict:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in d.items()}


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def read_report(path: Path | None = None) -> dict | None:
    """A report written by a run, or None."""
    path = REPORT if path is None else path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_budget(path: Path | None = None) -> dict:
    """``tests/budget.toml``: ``total_cpu_s``, ``[tiers]`` (CPU s per tier), ``[files]`` (CPU s per file) and
    ``[defaults]`` (the budget of a file not listed, per tier)."""
    path = BUDGET if path is None else path
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def file_budget(budget: dict, file: str, tier: str) -> float | None:
    """A file's CPU budget: its own line, else its tier's default for a file, else None."""
    files = budget.get("files", {})
    if file in files:
        return float(files[file])
    defaults = budget.get("defaults", {})
    if tier in defaults:
        return float(defaults[tier])
    return None


def render(report: dict, budget: dict, previous: dict | None, path: Path) -> list[str]:
    """The terminal's summary: tiers against the budget, the costliest files, what is over and what grew."""
    lines = []
    tiers_budget = budget.get("tiers", {})
    lines.append(
        f"{'tier':<22}{'files':>6}{'tests':>7}{'wall s':>9}{'CPU s':>9}{'budget':>8}{'JVMs':>6}{'jobs':>6}"
    )
    over = []
    for tier, t in report["tiers"].items():
        b = tiers_budget.get(tier)
        mark = ""
        if report["whole"] and b is not None and t["cpu_s"] > b:
            mark = "  OVER"
            over.append(f"tier {tier}: {t['cpu_s']:.0f} CPU s, budget {b}")
        lines.append(
            f"{tier:<22}{t['files']:>6}{t['tests']:>7}{t['wall_s']:>9.0f}{t['cpu_s']:>9.0f}"
            f"{(str(b) if b is not None else '-'):>8}{t['jvms']:>6}{t['jobs']:>6}{mark}"
        )
    shared = report["shared_cpu_s"]
    lines.append(
        f"{'shared set-up':<22}{'':>6}{'':>7}{'':>9}{shared:>9.0f}{budget.get('shared_cpu_s', '-')!s:>8}"
    )
    total_b = budget.get("total_cpu_s")
    lines.append(
        f"{'total':<22}{len(report['files']):>6}{len(report['tests']):>7}{report['wall_s']:>9.0f}"
        f"{report['cpu_s']:>9.0f}{(str(total_b) if total_b else '-'):>8}"
        f"   (+{report['other_cpu_s']:.0f} CPU s outside tests: collection, imports)"
    )
    if report["whole"] and total_b is not None and report["cpu_s"] > total_b:
        over.insert(0, f"the suite: {report['cpu_s']:.0f} CPU s, budget {total_b}")
    if report["whole"] and "shared_cpu_s" in budget and shared > budget["shared_cpu_s"]:
        over.append(f"shared set-up: {shared:.0f} CPU s, budget {budget['shared_cpu_s']}")
    lines.append("")
    lines.append("costliest files (CPU s, wall s, tests, JVMs, job runs):")
    costly = sorted(report["files"].items(), key=lambda kv: -kv[1]["cpu_s"])[:12]
    for f, e in costly:
        b = file_budget(budget, f, e["tier"])
        lines.append(
            f"  {e['cpu_s']:7.0f} {e['wall_s']:7.0f} {e['tests']:4d} {e['jvms']:3d} {e['jobs']:3d}  {f}"
            + (f"  (budget {b:.0f})" if b is not None else "")
        )
    for f, e in sorted(report["files"].items()):
        b = file_budget(budget, f, e["tier"])
        if b is not None and e["cpu_s"] > b:
            over.append(f"{f}: {e['cpu_s']:.0f} CPU s, budget {b:.0f}")
    grew = growth(report, previous)
    if over:
        lines.append("")
        lines.append("!!! OVER BUDGET (tests/budget.toml; docs/development.md says where a slow test goes):")
        lines.extend(f"!!!   {o}" for o in over)
    if grew:
        lines.append("")
        lines.append(f"!!! GREW since the last report ({previous.get('commit') if previous else '?'}):")
        lines.extend(f"!!!   {g}" for g in grew)
    lines.append("")
    lines.append(f"report: {path.relative_to(ROOT)} (python -m tests.suite_costs prints it again)")
    return lines


def growth(report: dict, previous: dict | None) -> list[str]:
    """The files whose CPU rose by more than :data:`GROWTH_SHARE` and :data:`GROWTH_MIN_S` since
    ``previous``."""
    if previous is None:
        return []
    out = []
    for f, e in sorted(report["files"].items()):
        before = previous.get("files", {}).get(f)
        if before is None or e["tests"] < before["tests"] * 0.5:
            continue
        delta = e["cpu_s"] - before["cpu_s"]
        if delta > GROWTH_MIN_S and delta > GROWTH_SHARE * before["cpu_s"]:
            out.append(f"{f}: {before['cpu_s']:.0f} -> {e['cpu_s']:.0f} CPU s (+{delta:.0f})")
    return out


def schedule(default: tuple[str, ...] = ()) -> list[str]:
    """The files to hand out first (relative to ``tests/``), costliest in wall time first: from the last
    whole-suite report, else from the budget file's ``[schedule]`` (wall seconds of the report it was
    written from: a fresh clone), else its ``[files]`` (CPU), else ``default``."""
    report = read_report()
    if report is not None and report.get("files"):
        ranked = {f: e["wall_s"] for f, e in report["files"].items() if not f.startswith("doctest:")}
    else:
        budget = read_budget()
        ranked = {f: float(v) for f, v in (budget.get("schedule") or budget.get("files", {})).items()}
    if not ranked:
        return list(default)
    # files of a few seconds keep pytest's order after these
    return [f for f, cost in sorted(ranked.items(), key=lambda kv: -kv[1]) if cost >= SCHEDULE_MIN_S]


def budget_from_report(report: dict, tiers: dict | None = None, headroom: float = 1.3) -> dict[str, int]:
    """Per-file budgets from a report: each file's share of its tier's budget (its CPU times the tier's
    budget over the tier's CPU, when the tier is over), else its CPU with ``headroom``; rounded up to 5 s,
    at least 10. Files under 8 CPU s and doctests keep their tier's default."""
    tiers = tiers or {}
    spent: dict[str, float] = {}
    for f, e in report["files"].items():
        spent[tier_of(f)] = spent.get(tier_of(f), 0.0) + e["cpu_s"]
    out = {}
    for f, e in sorted(report["files"].items()):
        if f.startswith("doctest:") or e["cpu_s"] < 8:
            continue
        tier = tier_of(f)
        if tier in tiers and spent[tier] > tiers[tier]:
            share = e["cpu_s"] * tiers[tier] / spent[tier]
        else:
            share = e["cpu_s"] * headroom
        out[f] = max(10, int(math.ceil(share / 5.0) * 5))
    return out


def write_file_budgets(report: dict, path: Path | None = None) -> None:
    """Rewrite the ``[files]`` table of the budget file from ``report`` (the rest of the file is kept)."""
    path = BUDGET if path is None else path
    text = path.read_text() if path.exists() else ""
    head = text.split("\n[files]", 1)[0].rstrip() + "\n"
    tiers = tomllib.loads(text).get("tiers", {}) if text else {}
    body = "\n".join(f'"{f}" = {v}' for f, v in budget_from_report(report, tiers).items())
    note = (
        "\n[files]\n# CPU s per file (python -m tests.suite_costs --budget, from the report at "
        f"{report.get('commit')}): a file's share of its tier's\n# budget where the tier is over it, else "
        "its CPU with 30 % headroom. Files not listed: [defaults].\n"
    )
    walls = {
        f: round(e["wall_s"])
        for f, e in sorted(report["files"].items(), key=lambda kv: -kv[1].get("wall_s", 0.0))
        if not f.startswith("doctest:") and e.get("wall_s", 0.0) >= SCHEDULE_MIN_S
    }
    schedule = (
        "\n\n[schedule]\n# Wall s per file in that report: the order a fresh clone's run hands the files out "
        "(longest first;\n# a run with a report of its own uses that report's).\n"
        + "\n".join(f'"{f}" = {v}' for f, v in walls.items())
    )
    path.write_text(head + note + body + (schedule if walls else "") + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    report = read_report(REPORT)
    if report is None:
        print(f"no report at {REPORT}: run bin/test first", file=sys.stderr)
        return 1
    if "--budget" in argv:
        write_file_budgets(report)
        print(f"wrote the per-file budgets of {BUDGET.relative_to(ROOT)} from {REPORT.relative_to(ROOT)}")
        return 0
    for line in render(report, read_budget(), read_report(PREVIOUS), REPORT):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
