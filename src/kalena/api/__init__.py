"""The HTTP API (FastAPI) over Kalena's store, its Prometheus metrics, and the queueing both it and
the CLI use (:mod:`.queue`)."""
