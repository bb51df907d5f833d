"""The streaming job's tests on a folder: the job's options on it, and the landing records they write.

:func:`folder_job` is the options of a run whose landing files, tables and checkpoint are ``in``, ``out``
and ``ck`` under one folder, without the console's progress; :func:`good` is a valid landing record (a JSON
line), :func:`write_lines` writes such lines as a landing file, and :func:`land` does so in a landing
order of its own (the file's modification time).
"""

import json
import os
from pathlib import Path
from typing import Any

from jobs.stream.options import JobOptions
from watermark.config import PipelineConfig


def folder_job(root: Path, config: PipelineConfig, **overrides: Any) -> JobOptions:
    """The job on ``root``: input ``root/in``, output ``root/out``, checkpoint ``root/ck``, no progress
    shown; ``overrides`` (any of :class:`JobOptions`' fields, these too) on top."""
    folders = {"input": str(root / "in"), "output": str(root / "out"), "checkpoint": str(root / "ck")}
    return JobOptions(**{**folders, "config": config, "progress": False, **overrides})


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def good(i, te, tp, key="k", part="p", value=1.0) -> str:
    return json.dumps(
        {
            "event_id": str(i),
            "key": key,
            "partition": part,
            "event_time_ms": te,
            "arrival_time_ms": tp,
            "value": value,
        }
    )


def land(folder: Path, name: str, lines: list[str], order: int) -> None:
    write_lines(folder / name, lines)
    stamp = 1_700_000_000 + order  # landing order: modification time
    os.utime(folder / name, (stamp, stamp))
