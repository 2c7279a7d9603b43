"""`dispatch login`: log in to another user's `dispatch up --shared` on this host (auth/login.py); and
the auth group: tokens and roles."""

from __future__ import annotations

import click

from ..core.errors import InvalidRequestError
from ..core.spec import _label


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


@click.group()
def auth():
    """Identity (docs/security.md): per-user tokens for signed requests."""


@auth.command("token")
@click.argument("user")
@click.option("--secret-file", default=None, type=click.Path(dir_okay=False),
              help="The lab secret (chmod 600; default: the one your `dispatch up` made in its state directory).")
def auth_token(user, secret_file):
    """Print USER's token (give it to them for $DISPATCH_TOKEN or ~/.config/dispatch/token)."""
    from ..auth.identity import load_secret, token_for
    from ..up.secure import lab_secret_file
    if not user:  # a token for '' is no one's
        raise InvalidRequestError("USER: empty; give a user name", field="USER")
    click.echo(token_for(load_secret(secret_file or lab_secret_file()), _label(user, "USER")))


@auth.command("roles")
@click.option("--namespace", "ns", default="dispatch", envvar="DISPATCH_NAMESPACE", show_default=True,
              help="The namespace whose roles to print.")
def auth_roles(ns):
    """Print the ACL SETUSER lines of the leader, agent and user roles (docs/security.md, Roles), for an
    external server: put each role's password in place of PASSWORD and pipe them to redis-cli."""
    from ..store.roles import print_roles

    print_roles(_label(ns, "--namespace"))
