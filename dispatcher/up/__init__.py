"""dispatch up: one process that owns an embedded server, a scheduler and an agent on one machine; its lock and its locked-down state dir."""
