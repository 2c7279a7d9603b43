"""An agent leaving its node (store/nodes.remove_node) takes only its own node record away: an agent
refused because another runs the node, or one taken over while it was stopped, leaves the live one be."""

from dispatcher.store import keys
from dispatcher.store.nodes import other_agent, remove_node, write_heartbeat

LIVE, REFUSED = "vm:/var/lib/dispatch/n1", "vm:/tmp/n1-again"


def test_an_agent_refused_for_a_live_node_leaves_that_node_in_place(client, ns):
    # a second `dispatch worker --node n1` was refused, then deregistered the live agent's node on its way
    # out: the node vanished from `dispatch nodes`, and a third agent started a moment later took it over
    # and had the live agent kill its running jobs as stale copies
    write_heartbeat(client, ns, "n1", [], 8, 32.0, 1000, agent=LIVE)
    assert other_agent(client, ns, "n1", REFUSED, 1500, 10.0) == (LIVE, 0.5)
    assert remove_node(client, ns, "n1", REFUSED) is False
    assert client.zscore(keys.nodes_heartbeat(ns), "n1") == 1000
    assert other_agent(client, ns, "n1", "vm:/tmp/n1-third", 1500, 10.0) == (LIVE, 0.5)  # refused too


def test_the_agent_of_the_node_takes_it_away_and_the_scheduler_hears_of_it(client, ns):
    write_heartbeat(client, ns, "n1", [], 8, 32.0, 1000, agent=LIVE)
    assert remove_node(client, ns, "n1", LIVE) is True
    assert client.zscore(keys.nodes_heartbeat(ns), "n1") is None
    assert client.hget(keys.node(ns, "n1"), "agent") is None
    assert client.sismember(keys.nodes_changed(ns), "n1")
    assert remove_node(client, ns, "n1", LIVE) is False  # gone already: nothing to take
