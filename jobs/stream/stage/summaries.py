"""The driver's reading of the executors' partition summaries (the stage in the executors).

Each executor that ran a partition's generator (:func:`jobs.stream.workers.executor_stage.judge_partitions`)
reports one :class:`~jobs.stream.workers.executor_stage.PartitionSummary`. :func:`settle` orders them,
checks that one task judged each partition, and settles the owners of new keys; :func:`segments_table`
turns their fire segments into the table Spark joins the open windows with
(:mod:`jobs.stream.stage.executors`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.stream.workers.executor_stage import PartitionSummary

#: The fire table the driver broadcasts back: per owner partition, which window ends fire where.
SEGMENTS_SCHEMA = pa.schema(
    [
        ("owner", pa.string()),
        ("lo", pa.int64()),  # exclusive
        ("hi", pa.int64()),  # inclusive
        ("trigger_watermark_ms", pa.int64()),
        ("fire_arrival_ms", pa.int64()),
        ("ramp_offset_ms", pa.int64()),  # null: a step at fire_arrival_ms; else W(t) = t - offset
        ("cap_ms", pa.int64()),  # a ramp's gap ends at this arrival, where W is the trigger
    ]
)


@dataclass
class Settled:
    """The driver's reading of a batch's summaries."""

    summaries: list[PartitionSummary]  # in order of each partition's first arrival
    invalid: int
    claims: list[tuple[str, str]]  # (key, partition) newly owned, in arrival order of the first rows
    losers: list[tuple[str, str]]  # (key, partition) whose rows are foreign after all
    split: bool  # a source partition was judged by more than one task: the pass must be redone


def settle(texts: list[str]) -> Settled:
    """Read the summaries: order partitions, check one task per partition, settle new keys' owners.

    A key that no partition owned before the batch goes to the partition of its first arrival (arrival
    time, file, line); any other partition that met it in the same batch labelled its rows as its own, and
    those rows are foreign after all (``losers``).
    """
    summaries: list[PartitionSummary] = []
    invalid = 0
    for text in texts:
        data = json.loads(text)
        if "invalid" in data:
            invalid += int(data["invalid"])
        else:
            summaries.append(PartitionSummary.from_json(text))
    seen: set[str] = set()
    split = False
    for s in summaries:
        split |= s.partition in seen
        seen.add(s.partition)
    summaries.sort(key=lambda s: s.first)
    firsts: dict[str, tuple[tuple[int, int, int], str]] = {}
    met: dict[str, list[str]] = {}
    for s in summaries:
        for key, tp, file, line in s.new_keys:
            at = (tp, file, line)
            met.setdefault(key, []).append(s.partition)
            if key not in firsts or at < firsts[key][0]:
                firsts[key] = (at, s.partition)
    claims = [(key, part) for key, (_, part) in sorted(firsts.items(), key=lambda kv: kv[1][0])]
    losers = [(key, p) for key, parts in met.items() for p in parts if p != firsts[key][1]]
    return Settled(summaries, invalid, claims, losers, split)


def segments_table(summaries: list[PartitionSummary]) -> pa.Table:
    """The fire table the driver broadcasts: every partition's fire segments."""
    return segment_rows([(s.partition, *seg) for s in summaries for seg in s.segments])


def segment_rows(rows: list[tuple[str, int, int, int, int, int | None, int | None]]) -> pa.Table:
    """:data:`SEGMENTS_SCHEMA` rows ``(owner, *segment)`` (:data:`Segment`) as a table."""
    columns: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [() for _ in SEGMENTS_SCHEMA]
    return pa.Table.from_arrays(
        [pa.array(list(c), f.type) for c, f in zip(columns, SEGMENTS_SCHEMA, strict=True)],
        schema=SEGMENTS_SCHEMA,
    )
