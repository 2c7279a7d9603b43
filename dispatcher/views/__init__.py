"""Read-only drivers over the store: explain (why), forecast (eta), the board, alerts, metrics, top and the dashboard. Nothing here writes a job."""
