"""A standby scheduler started beside `dispatch up` without --admins (as the README's "run a second
scheduler anywhere" reads) took the lead with no admins, and `dispatch drain` by the user `up` named
admin was refused until `up`'s own scheduler led again. Without --admins it now takes the admins the
leader published with identity's mode."""

from types import SimpleNamespace

from dispatcher.auth.identity import Verifier
from dispatcher.cli.ops import _identity_matches
from dispatcher.store.requests import RequestServer

SECRET = b"s" * 32


def test_a_scheduler_without_admins_takes_those_the_cluster_published(client, ns):
    RequestServer(client, ns, Verifier(SECRET, ["root", "ops"]), None).publish_mode()  # as `up`'s scheduler does
    standby = Verifier(SECRET)
    _identity_matches(SimpleNamespace(client=client, ns=ns), standby, "scheduler")
    assert standby.admins == {"root", "ops"} and standby.may_act_on("root", "alice")
    own = Verifier(SECRET, ["carol"])  # --admins given: its own
    _identity_matches(SimpleNamespace(client=client, ns=ns), own, "scheduler")
    assert own.admins == {"carol"}
