"""The column reference of ``docs/tables.md``, generated from the table schemas of :mod:`jobs.common.schemas`.

The reference sits between the markers :data:`BEGIN` and :data:`END` of ``docs/tables.md``;
``tests/unit/project/test_docs.py`` fails when it differs from :func:`render_table_reference`. Regenerate
it with::

    python -m jobs.common.tabledocs --write

Without ``--write`` the reference is printed; ``--check`` exits 1 when the file is not current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa

from jobs.common.schemas import COLUMN_DOCS, PARTITIONS, PROPERTIES, TABLE_DOCS, TABLES

BEGIN = "<!-- tables:begin -->"
END = "<!-- tables:end -->"
DOC = Path(__file__).resolve().parents[2] / "docs" / "tables.md"

#: Delta (Spark SQL) type of each Arrow type the schemas use.
_TYPES = {
    pa.string(): "STRING",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.date32(): "DATE",
}


def _type(arrow_type: pa.DataType) -> str:
    return _TYPES.get(arrow_type, str(arrow_type))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_table_reference() -> str:
    """The Markdown between the markers: one section per table of :data:`jobs.common.schemas.TABLES`.

    Raises
    ------
    KeyError
        If a table or a column has no description in :data:`jobs.common.schemas.TABLE_DOCS` /
        :data:`jobs.common.schemas.COLUMN_DOCS`.

    >>> text = render_table_reference()
    >>> text.splitlines()[0]
    '### `aggregates`'
    >>> "| `window_date` | DATE, generated |" in text
    True

    """
    out: list[str] = []
    for table, schema in TABLES.items():
        docs = COLUMN_DOCS[table]
        columns = [(field.name, _type(field.type)) for field in schema]
        notes = [f"One row per {TABLE_DOCS[table]}."]
        if table in PARTITIONS:
            column, source = PARTITIONS[table]
            columns.append((column, "DATE, generated"))
            notes.append(
                f"Partitioned by `{column}`, a generated column: "
                f"`DATE_ADD(DATE'1970-01-01', {source} DIV 86400000)`."
            )
        for key, value in PROPERTIES.get(table, {}).items():
            notes.append(f"Table property `{key}={value}`.")
        extra = sorted(set(docs) - {name for name, _ in columns})
        if extra:
            msg = f"COLUMN_DOCS[{table!r}] describes columns the table does not have: {', '.join(extra)}"
            raise KeyError(msg)
        out += [f"### `{table}`", "", " ".join(notes), "", "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{name}` | {kind} | {_cell(docs[name])} |" for name, kind in columns]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def splice(document: str, reference: str) -> str:
    r"""``document`` with the text between its markers replaced by ``reference``.

    >>> print(splice(f"a\n{BEGIN}\nold\n{END}\nb", "new\n").replace(BEGIN, "BEGIN").replace(END, "END"))
    a
    BEGIN
    new
    END
    b
    """
    head, sep, rest = document.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        msg = f"the markers {BEGIN} and {END} are missing"
        raise ValueError(msg)
    return f"{head}{BEGIN}\n{reference}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.common.tabledocs [--write | --check]``."""
    parser = argparse.ArgumentParser(
        prog="python -m jobs.common.tabledocs", description=__doc__.splitlines()[0]
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"rewrite the reference in {DOC}")
    group.add_argument("--check", action="store_true", help="exit 1 if the reference in the file is stale")
    args = parser.parse_args(argv)
    reference = render_table_reference()
    if not args.write and not args.check:
        sys.stdout.write(reference)
        return 0
    current = DOC.read_text(encoding="utf-8")
    wanted = splice(current, reference)
    if args.check:
        if wanted != current:
            print(f"{DOC} is stale: run python -m jobs.common.tabledocs --write", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        DOC.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
