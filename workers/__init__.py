"""The node agent: GPU probing, heartbeats, and running jobs from the node's RQ queue."""
