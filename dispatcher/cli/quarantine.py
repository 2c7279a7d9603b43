"""`dispatch quarantine`: what the scheduler set aside (store/quarantine.py), newest first: bad index entries,
unreadable records, keys of the wrong type moved out of the way; `--clear` empties the list once read."""

from __future__ import annotations

import json
import time

import click

from . import _table, common, json_flag


@click.command()
@click.option("--clear", is_flag=True,
              help="Empty the list once read (what was set aside stays where it was moved; `queue` stops saying so).")
@click.option("-n", "--limit", default=100, show_default=True, type=click.IntRange(1, 100_000),
              help="The newest this many.")
@json_flag
@common
def quarantine(ctx, clear, limit, as_json):
    """What the scheduler set aside, newest first: index entries and records it could not use, and keys of
    the wrong type (moved, with where to)."""
    from ..store import keys
    from ..store.connect import text, tolerant

    got = tolerant(lambda: ctx.client.xrevrange(keys.quarantine(ctx.ns), count=limit), []) or []
    rows = [{"id": text(i), **{text(k): text(v) for k, v in f.items()}} for i, f in got]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    elif not rows:
        click.echo("nothing quarantined")
    else:
        def at(r):
            ms = r.get("at_ms") or r["id"].partition("-")[0]
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(ms) / 1000)) if ms.isdigit() else "-"

        click.echo(_table([[at(r), r.get("key", "-"), r.get("member") or "-", r.get("reason", "-"),
                            r.get("moved_to") or r.get("restored") or "-"] for r in rows],
                          ["TIME", "KEY", "MEMBER", "REASON", "NOW"]))
    if clear and rows:  # what came after the read stays listed
        newest = rows[0]["id"]
        ms, _, seq = newest.partition("-")
        removed = ctx.client.xtrim(keys.quarantine(ctx.ns), minid=f"{ms}-{int(seq) + 1}")
        click.echo(f"cleared {removed} entr{'y' if removed == 1 else 'ies'}", err=True)
