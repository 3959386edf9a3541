"""Shared by the archive's CLI tests: a small plan and samples recorded for it."""

from __future__ import annotations

import numpy as np

from kalena.archive import Archive, ArchiveEvent

WORKLOADS = """\
apiVersion: kuberina.io/v1
kind: Workloads
namespaces:
  shop:
    - name: api
      replicas: 1
      requests: {cpu: 2, ram: 4}
    - name: db
      replicas: 2
      requests: {cpu: 1, ram: 8}
    - name: idle
      replicas: 1
      requests: {cpu: 1}
"""


def record(where: str, hours: float = 1.0) -> np.ndarray:
    """api uses 0..100 % of 2 cpu in even steps (so its knots are exact); db's two replicas use
    0.5 cpu and reserve 2 (a request of 1: drift); idle is never seen. Returns api's cpu."""
    with Archive(where) as a:
        api = []
        for k in range(int(hours * 360)):
            cpu = 2.0 * (k % 101) / 100.0
            api.append(cpu)
            use = np.full((3, 8), np.nan)
            res = np.full((3, 8), np.nan)
            use[0, :2], res[0, :2] = (cpu, 1.0), (2.0, 4.0)
            use[1:, :2], res[1:, :2] = (0.5, 8.0), (2.0, 8.0)
            a.record(k * 10.0, "n1", ["shop/api-0", "shop/db-0000", "shop/db-0001"], use, res)
        a.record_events([
            ArchiveEvent(100.0, "eviction", "n1", "shop/db-0001", "memory-pressure"),
            ArchiveEvent(200.0, "limit-breach", "n1", "shop/api-0", "limit-breach"),
        ])  # fmt: skip
    return np.array(api)
