"""The wheel: built from the source tree, installed in a fresh virtualenv, and its command awm runs there.

uv builds the wheel from a copy of the tree's files (those git tracks or would track: no build/ or egg-info
left in the work tree) and installs it with the extra ``awm stream --help`` needs (monitoring: the job's
command line imports its metrics) into a new virtualenv, offline from uv's cache (bin/bootstrap.sh filled it)
and constrained to requirements.lock, so the ranges of pyproject.toml must admit the locked versions. Spark
is not installed there: ``awm stream --help`` must not need it. About 15 s on two cores; nothing is timed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from watermark.strategies.registry import STRATEGIES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: The extras `awm stream --help` imports besides the library's own dependencies.
EXTRAS = "monitoring"
PACKAGES = {"awm", "watermark", "jobs", "monitoring", "tools", "dags"}


def run(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` outside this test's virtualenv and source tree (no VIRTUAL_ENV, PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def source_files() -> list[str]:
    """The tree's files as a fresh clone plus the uncommitted ones would have them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return [name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> tuple[Path, Path]:
    """(the built wheel, a fresh virtualenv with it installed)."""
    if not UV.exists():
        pytest.fail(f"uv is not in {UV.parent}: run bin/bootstrap.sh, which installs it")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in source_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    build = run(
        UV,
        "build",
        "--wheel",
        "--offline",
        "--python",
        sys.executable,
        "--out-dir",
        tmp / "dist",
        src,
        cwd=tmp,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = (tmp / "dist").glob("*.whl")
    venv = tmp / "venv"
    made = run(UV, "venv", "--offline", "--python", sys.executable, venv, cwd=tmp)
    assert made.returncode == 0, made.stderr[-3000:]
    install = run(
        UV,
        "pip",
        "install",
        "--offline",
        "--python",
        venv / "bin" / "python",
        "--constraint",
        ROOT / "requirements.lock",
        f"{PROJECT['name']}[{EXTRAS}] @ {wheel.as_uri()}",
        cwd=tmp,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return wheel, venv


def test_the_wheel_holds_every_package_and_the_one_command(wheel_venv):
    wheel, _ = wheel_venv
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        info = f"{PROJECT['name'].replace('-', '_')}-{PROJECT['version']}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        metadata = whl.read(f"{info}/METADATA").decode()
    assert {name.split("/")[0] for name in names} == PACKAGES | {info}
    packages = {
        str(p.parent.relative_to(ROOT)) for top in PACKAGES for p in (ROOT / top).rglob("__init__.py")
    }
    assert packages <= {str(Path(name).parent) for name in names if name.endswith("/__init__.py")}
    assert entry_points.split() == ["[console_scripts]", "awm", "=", "awm.cli:main"]
    assert "Requires-Dist: numpy<3,>=2.0" in metadata and "Requires-Dist: river<0.27,>=0.26" in metadata


def test_awm_runs_from_the_wheel_without_spark(wheel_venv):
    _, venv = wheel_venv
    awm, python = venv / "bin" / "awm", venv / "bin" / "python"
    where = run(
        python, "-c", "import awm, importlib.util as u; print(awm.__file__, u.find_spec('pyspark'))", cwd=venv
    )
    assert where.returncode == 0, where.stderr
    location, spark = where.stdout.split()
    assert Path(location).is_relative_to(venv) and spark == "None"  # the installed copy, and no Spark

    version = run(awm, "--version", cwd=venv)
    assert (version.returncode, version.stdout) == (0, f"awm {PROJECT['version']}\n"), version.stderr

    stream = run(awm, "stream", "--help", cwd=venv)
    assert stream.returncode == 0, stream.stderr[-3000:]
    assert stream.stdout.startswith("usage: awm stream ")
    assert "--output" in stream.stdout and "--version" in stream.stdout

    strategies = run(awm, "strategies", cwd=venv)
    assert strategies.returncode == 0, strategies.stderr[-3000:]
    listed = [line.split()[0] for line in strategies.stdout.splitlines() if line[:1].strip()]
    assert listed == list(STRATEGIES) and "periodic" in listed
