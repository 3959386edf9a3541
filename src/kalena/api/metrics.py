"""Prometheus metrics, read from the store at each scrape (prometheus-client's custom collector):
the exporter keeps nothing of its own, so a restarted daemon reports the same counters.

* ``kalena_node_capacity``, ``kalena_node_limits``, ``kalena_node_reservations``,
  ``kalena_node_usage`` (labels ``node``, ``resource``): Borg's slack view, as each agent last
  wrote it (limits are the sum of requests, as Borg's limits are);
* ``kalena_node_batch_tasks``, ``kalena_node_report_timestamp_seconds`` (``node``);
* ``kalena_queue_depth``: jobs waiting (queued, pending, requeued); ``kalena_jobs`` (``state``);
* counters from the events: ``kalena_placements_total``, ``kalena_throttles_total`` (``node``),
  ``kalena_evictions_total`` (``node``, ``reason``: the eviction's cause).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kalena.store import Store

SERIES = {
    "capacity": "What the node has.",
    "limits": "Sum of the requests of everything on the node (Borg's limits).",
    "reservations": "Sum of the reservations (the estimate of what each needs).",
    "usage": "Measured use.",
}
WAITING = ("submitted", "pending", "requeued")


class StoreCollector:
    def __init__(self, db: Store) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        nodes = self.db.nodes()
        for name, doc in SERIES.items():
            g = GaugeMetricFamily(f"kalena_node_{name}", doc, labels=["node", "resource"])
            for node, st in nodes.items():
                for dim, v in (st.get(name) or {}).items():
                    if v is not None:
                        g.add_metric([node, dim], float(v))
            yield g
        tasks = GaugeMetricFamily("kalena_node_batch_tasks", "Batch runs on the node.", labels=["node"])
        seen = GaugeMetricFamily(
            "kalena_node_report_timestamp_seconds", "When the node's agent last wrote.", labels=["node"]
        )
        for node, st in nodes.items():
            tasks.add_metric([node], float(len(st.get("batch") or [])))
            seen.add_metric([node], float(st.get("at") or 0.0))
        yield tasks
        yield seen
        states = Counter(j.state for j in self.db.jobs())
        jobs = GaugeMetricFamily("kalena_jobs", "Jobs by state.", labels=["state"])
        for state, n in sorted(states.items()):
            jobs.add_metric([state], float(n))
        yield jobs
        yield GaugeMetricFamily(
            "kalena_queue_depth", "Jobs waiting to run.", value=float(sum(states[s] for s in WAITING))
        )
        rows = self.db.db.execute(
            "SELECT coalesce(node, ''), kind, coalesce(json_extract(data, '$.why.cause'), ''), count(*)"
            " FROM events WHERE kind IN ('admit', 'throttle', 'evict')"
            " AND coalesce(json_extract(data, '$.resumed'), 0) = 0 GROUP BY 1, 2, 3"
        ).fetchall()
        placed = CounterMetricFamily("kalena_placements", "Batch runs started.", labels=["node"])
        throttled = CounterMetricFamily("kalena_throttles", "Batch CPU quotas rewritten.", labels=["node"])
        evicted = CounterMetricFamily("kalena_evictions", "Evictions by cause.", labels=["node", "reason"])
        counts: Counter[tuple[str, ...]] = Counter()
        for node, kind, cause, n in rows:
            counts[(kind, node) if kind != "evict" else (kind, node, cause or "unknown")] += int(n)
        for key, n in sorted(counts.items()):
            family = {"admit": placed, "throttle": throttled, "evict": evicted}[key[0]]
            family.add_metric(list(key[1:]), float(n))
        yield placed
        yield throttled
        yield evicted


def render_metrics(db: Store) -> tuple[bytes, str]:
    """The exposition text of the store's metrics, and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(db))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST
