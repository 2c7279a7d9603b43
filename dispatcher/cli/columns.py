"""A listing's columns chosen by name and its header left out, for scripts (squeue's -O/--Format and
-h/--noheader): `dispatch queue -o id,state --noheader` prints two columns, nothing else on stdout."""

from __future__ import annotations

import functools

import click


def column_options(fn):
    """-o/--format COLS and --noheader; the command gets `fields` (a tuple, empty for every column) and
    `noheader`."""

    @functools.wraps(fn)
    def with_columns(*args, fields: str | None = None, **kwargs):
        chosen = tuple(f.strip().upper() for f in (fields or "").split(",") if f.strip())
        if fields is not None and not chosen:
            raise click.BadParameter("name one column or more, comma-separated (id,state,node)",
                                     param_hint="--format")
        return fn(*args, fields=chosen, **kwargs)

    with_columns = click.option("--noheader", is_flag=True,
                                help="No header line; what is not a row (N more, notes) goes to stderr.")(with_columns)
    return click.option("-o", "--format", "fields", metavar="COLS",
                        help="Only these columns, in this order: comma-separated names from the header "
                             "(id,state,node; any case).")(with_columns)


def pick(rows: list[list], header: list[str], fields: tuple[str, ...]) -> tuple[list[list], list[str]]:
    """The rows and header cut to `fields` (all when empty); an unknown name is a one-line usage error."""
    if not fields:
        return rows, header
    unknown = [f for f in fields if f not in header]
    if unknown:
        raise click.BadParameter(f"no column {unknown[0].lower()!r}; the columns are "
                                 f"{','.join(h.lower() for h in header)}", param_hint="--format")
    at = [header.index(f) for f in fields]
    return [[r[i] for i in at] for r in rows], [header[i] for i in at]


#: Control characters (C0, DEL, C1) as escapes: a job's name, command or variables printed raw rang the
#: terminal's bell, moved its cursor, or made grep take the output for binary; and the invisible ones that
#: reorder or hide text (bidirectional overrides and isolates, zero-width marks) as \\uXXXX.
_VISIBLE = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))} | {0x0a: "\\n", 0x09: "\\t"} | {
    c: f"\\u{c:04x}" for c in (0x61c, *range(0x200b, 0x2010), *range(0x202a, 0x202f), *range(0x2060, 0x2065),
                             *range(0x2066, 0x206a), 0xfeff)}


def visible(text: str) -> str:
    """`text` with its control characters escaped (\\n, \\t, \\x07), for a terminal."""
    return text.translate(_VISIBLE)


def table(rows: list[list], header: list[str], noheader: bool = False) -> str:
    """Columns as wide as their widest cell on a terminal (a CJK letter takes two columns), two spaces
    apart, control characters escaped; without the header line if asked."""
    shown = [[visible(str(c)) for c in r] for r in (rows if noheader else [header] + rows)]
    if not shown:
        return ""
    widths = [max(_width(r[i]) for r in shown) for i in range(len(header))]
    return "\n".join("  ".join(c + " " * (w - _width(c)) for c, w in zip(r, widths)).rstrip() for r in shown)


def _width(text: str) -> int:
    """Terminal columns of `text`: two for a wide (East Asian) character, one for any other."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
