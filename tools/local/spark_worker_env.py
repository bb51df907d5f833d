"""The local Spark cluster's workers' Python: a virtualenv of the project's dependencies, not the project.

:func:`worker_python` makes it with ``uv`` (the project's runtime dependencies: ``pyproject.toml``'s
dependencies and its ``spark`` extra, at the versions of ``requirements.lock``) once per lock and caches it
under ``out/spark-worker-env/<hash>/`` (:func:`worker_env_key`); ``.venv`` cannot serve: its editable install
puts the checkout on every ``sys.path``. :func:`pyspark_home` is the pip PySpark in it, whose
``bin/spark-class`` starts the cluster's JVMs (:mod:`tools.local.spark_cluster`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

__all__ = ["ENV_CACHE", "SparkClusterError", "pyspark_home", "worker_env_key", "worker_python"]

ROOT = Path(__file__).resolve().parents[2]
#: Where :func:`worker_python` keeps the workers' virtualenvs, one per key (lock, dependencies, Python).
ENV_CACHE = ROOT / "out" / "spark-worker-env"
#: What the workers' Python must import (the executors' share of the job), and what it must not.
_WORKER_IMPORTS = ("pyspark", "numpy", "pyarrow", "pandas", "river", "numba")
_PROJECT_PACKAGES = ("jobs", "watermark", "monitoring", "awm", "tools", "dags")


class SparkClusterError(RuntimeError):
    """The local cluster cannot be started, reached or stopped; the message says why and what to do."""


def _runtime_requirements(root: Path) -> list[str]:
    """The project's runtime dependencies: ``pyproject.toml``'s dependencies and its ``spark`` extra."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["spark"]]


def worker_env_key(root: Path = ROOT) -> str:
    """The cache key of the workers' virtualenv: the lock, the dependencies, the Python and the machine."""
    digest = hashlib.sha256()
    digest.update((root / "requirements.lock").read_bytes())
    digest.update(json.dumps(_runtime_requirements(root)).encode())
    digest.update(f"{sys.version}|{platform.machine()}|{sys.base_prefix}".encode())
    return digest.hexdigest()[:16]


def _clean_env() -> dict[str, str]:
    """The environment without a virtualenv or a ``PYTHONPATH`` (for uv and the workers' Python)."""
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}


def _uv() -> str:
    uv = Path(sys.executable).parent / "uv"
    found = str(uv) if uv.exists() else shutil.which("uv")
    if found is None:
        msg = "uv not found (next to this Python or on PATH): run bin/bootstrap.sh, which installs it"
        raise SparkClusterError(msg)
    return found


def worker_python(root: Path = ROOT, cache: Path | None = None) -> Path:
    """The workers' Python: a virtualenv of the project's runtime dependencies without the project.

    Made with ``uv`` (``uv venv``, then ``uv pip install --compile-bytecode --constraint requirements.lock``
    of :func:`_runtime_requirements`; offline from uv's cache first, which ``bin/bootstrap.sh`` filled)
    the first time, under ``cache/<key>/`` (:func:`worker_env_key`), and reused while the lock, the
    dependencies and the Python stay the same. A file lock serialises two callers making it at once; the
    environment counts as made when its ``.complete`` stamp exists, written after a check that it imports
    PySpark, numpy, pyarrow, river and numba and none of the project's packages.

    Returns
    -------
    Path
        ``cache/<key>/bin/python``.

    Raises
    ------
    SparkClusterError
        If uv is missing, the install fails, or the check does.

    """
    cache = (cache or ENV_CACHE).absolute()
    env_dir = cache / worker_env_key(root)
    python = env_dir / "bin" / "python"
    stamp = env_dir / ".complete"
    if stamp.exists():
        return python
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():  # made meanwhile by another process
            return python
        shutil.rmtree(env_dir, ignore_errors=True)
        uv, env = _uv(), _clean_env()

        def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(c) for c in command], cwd=cache, env=env, capture_output=True, text=True, check=False
            )

        made = run(uv, "venv", "--quiet", "--python", sys.executable, env_dir)
        if made.returncode != 0:
            msg = f"uv venv {env_dir} failed:\n{made.stderr[-3000:]}"
            raise SparkClusterError(msg)
        install = [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", python]
        install += ["--constraint", root / "requirements.lock", *_runtime_requirements(root)]
        done = run(*install[:3], "--offline", *install[3:])
        if done.returncode != 0:  # something missing from uv's cache: from the index
            done = run(*install)
        if done.returncode != 0:
            msg = f"installing the workers' dependencies into {env_dir} failed:\n{done.stderr[-3000:]}"
            raise SparkClusterError(msg)
        check = (
            "import importlib.util as u, sys\n"
            f"for name in {_WORKER_IMPORTS!r}: __import__(name)\n"
            f"found = [n for n in {_PROJECT_PACKAGES!r} if u.find_spec(n) is not None]\n"
            "sys.exit(f'the project is importable: {found}' if found else 0)\n"
        )
        checked = run(python, "-c", check)
        if checked.returncode != 0:
            msg = f"the workers' Python {python} fails its check:\n{checked.stderr[-3000:]}"
            raise SparkClusterError(msg)
        stamp.write_text(json.dumps({"made_at": time.time(), "requirements": _runtime_requirements(root)}))
    return python


def pyspark_home(python: Path) -> Path:
    """The pip PySpark of the virtualenv whose interpreter is ``python`` (its ``bin/spark-class``)."""
    found = sorted(python.parent.parent.glob("lib/python3*/site-packages/pyspark/bin/spark-class"))
    if not found:
        msg = f"no pyspark/bin/spark-class in the virtualenv of {python}"
        raise SparkClusterError(msg)
    return found[0].parent.parent
