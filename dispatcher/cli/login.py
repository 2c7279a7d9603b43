"""`dispatch login`: log in to another user's `dispatch up --shared` on this host (login.py)."""

from __future__ import annotations

import click


@click.command()
@click.argument("socket_arg", metavar="[SOCKET]", required=False)
@click.option("--socket", "socket_opt", default=None, metavar="PATH",
              help="The login socket of the owner's `dispatch up --shared` (default: $DISPATCH_SOCKET, else the "
                   "one /tmp/dispatch-*/dispatch.sock there is).")
def login(socket_arg, socket_opt):
    """Log in to a shared dispatch on this host: your token, its URL and namespace are kept in
    ~/.config/dispatch/login.json, and your commands use them."""
    from ..auth.login import login as do_login

    got = do_login(socket_opt or socket_arg)
    click.echo(f"logged in to {got['owner']}'s dispatch as {got['user']} (namespace {got['namespace']})")
