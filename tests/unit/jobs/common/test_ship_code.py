"""The code the Arrow path ships to executors: every module, the ``jobs.stream`` package included."""

import zipfile

from jobs.common.session import PACKAGES, ROOT, code_archive


def test_the_archive_holds_every_module_of_the_packages_and_their_subpackages(tmp_path):
    names = set(zipfile.ZipFile(code_archive(tmp_path)).namelist())
    modules = {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert names == modules
    assert {"jobs/stream/__init__.py", "jobs/stream/handler.py", "jobs/stream/workers/arrow_path.py"} <= names
