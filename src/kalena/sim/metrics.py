"""Per-tick accounting: reclaimed capacity, work, unmet demand, the slack view and reservation accuracy.

Per node ``n`` and tick (length ``dt``), with ``C`` capacity, ``Q`` production requests (the
blueprint), ``A = max(0, C - Q)`` the capacity the blueprint left unallocated, ``B`` the batch
reservations (the reservation ledger's batch part) and ``b`` the batch usage:

* reclaimed capacity ``X_n = max(0, B_n - A_n)``: batch reservation standing in capacity the
  blueprint allocated to production. Integrated over time: core-hours (cpu), GiB-hours (ram).
  With reclamation disabled every reservation stays at its request and the ledger's fit keeps
  ``B_n <= A_n``, so ``X_n = 0`` by construction.
* work in reclaimed capacity: ``b_n * X_n / B_n`` (the reclaimed share of the node's batch
  reservation, applied to the batch cpu it used: reservation-ledger accounting, seed 000 §6.3
  metric 2). ``reclaimed_work_fraction`` = that, integrated, over all cpu core-seconds used by
  production and batch. For comparison, the usage-based count ``max(0, b_n - A_n)`` (batch cpu
  used beyond the unallocated capacity) gives ``batch_work_above_unallocated_fraction``.
* Borg's task-level count: the batch cpu used by pods whose placement needed reclaimed capacity
  (by requests, production's and the batch pods' before it, the node had no room for the pod on
  cpu or ram), over all cpu work: ``task_reclaimed_work_fraction``. Zero in an arm without
  reclamation up to the fit's rounding (the ledger then fits by requests, on its own running sums).
* Pareto reserve yield: over active nodes (``Q_n > 0``), ``sum min(b_n, A_n) / sum A_n``
  integrated over time: the share of the reserve the blueprint left on the nodes it uses that
  carried batch work.
* the slack view (Borg's Figure 12) every ``sample_every`` ticks: capacity, requests (Borg's
  "limit" is the Kubernetes request, seed 000 Appendix A), reservations and usage, cluster-wide
  and per node.
* reservation accuracy every ``accuracy_every`` ticks: r/R and u/R of every production pod past
  its startup grace, on cpu and ram.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from kalena.core.resources import CPU, RAM


class Metrics:
    def __init__(self, capacity: np.ndarray, request_sum: np.ndarray, ticks: int, sample_every: int) -> None:
        self.capacity = capacity
        self.unallocated = np.maximum(capacity - request_sum, 0.0)
        self.unallocated[~np.isfinite(self.unallocated)] = 0.0
        self.active = request_sum[:, CPU] > 0
        # fixed for the run: each tick's reserve term, computed once
        self._active_unallocated = self.unallocated[self.active, CPU]
        self._reserve = float(self._active_unallocated.sum())
        self.sample_every = sample_every
        samples = ticks // sample_every + 1
        n = len(capacity)
        self.t = np.zeros(samples)
        self.cluster = np.zeros((samples, 5))  # capacity, requests, reservations, usage, production usage
        self.node = np.zeros((samples, n, 3), dtype=np.float32)  # requests, reservations, usage (cpu)
        self.samples = 0
        self.sums: Counter[str] = Counter()
        self.evictions: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.accuracy: dict[str, list[np.ndarray]] = {
            "cpu_reservation": [],
            "cpu_usage": [],
            "ram_reservation": [],
            "ram_usage": [],
        }
        self.violations: list[str] = []

    def tick(
        self,
        dt: float,
        prod_cpu: np.ndarray,
        batch_cpu: np.ndarray,
        batch_res_cpu: np.ndarray,
        batch_res_ram: np.ndarray,
        unmet: float,
        capped: float,
        batch_cpu_by_reclaim: float = 0.0,
        harm: tuple[float, int, int] = (0.0, 0, 0),
    ) -> None:
        """Integrate one tick from per-node (N,) production and batch cpu usage and batch reservations;
        ``harm``: production's interference cores, its rows above their reservation, its live rows."""
        x_cpu = np.maximum(batch_res_cpu - self.unallocated[:, CPU], 0.0)
        x_ram = np.maximum(batch_res_ram - self.unallocated[:, RAM], 0.0)
        share = np.divide(x_cpu, batch_res_cpu, out=np.zeros(len(x_cpu)), where=batch_res_cpu > 0)
        s = self.sums
        s["production_cpu"] += float(prod_cpu.sum()) * dt
        s["batch_cpu"] += float(batch_cpu.sum()) * dt
        s["batch_cpu_by_reclaim"] += batch_cpu_by_reclaim * dt
        s["reclaimed_cpu"] += float(x_cpu.sum()) * dt
        s["reclaimed_ram"] += float(x_ram.sum()) * dt
        s["reclaimed_work"] += float((batch_cpu * share).sum()) * dt
        s["work_above_unallocated"] += float(np.maximum(batch_cpu - self.unallocated[:, CPU], 0.0).sum()) * dt
        s["unmet"] += unmet * dt
        s["capped"] += capped * dt
        s["interference"] += harm[0] * dt
        s["production_above_reservation"] += harm[1] * dt
        s["production_pod_seconds"] += harm[2] * dt
        a = self._active_unallocated
        s["reserve"] += self._reserve * dt
        s["reserve_used"] += float(np.minimum(batch_cpu[self.active], a).sum()) * dt
        s["ticks"] += 1

    def sample(
        self, t: float, requests: np.ndarray, reservations: np.ndarray, usage: np.ndarray, prod_use: float
    ) -> None:
        """One point of the slack view: (N,) cpu requests, reservations, usage per node."""
        k = self.samples
        if k >= len(self.t):
            return
        cap = self.capacity[:, CPU]
        self.t[k] = t
        self.cluster[k] = (
            cap[np.isfinite(cap)].sum(),
            requests.sum(),
            reservations.sum(),
            usage.sum(),
            prod_use,
        )
        self.node[k, :, 0] = requests
        self.node[k, :, 1] = reservations
        self.node[k, :, 2] = usage
        self.samples += 1

    def record_accuracy(self, requests: np.ndarray, reservations: np.ndarray, usage: np.ndarray) -> None:
        """Ratios over production rows past their grace (arrays (P, 8)); rows with R = 0 are skipped."""
        for dim, name in ((CPU, "cpu"), (RAM, "ram")):
            ok = requests[:, dim] > 0
            req = requests[ok, dim]
            self.accuracy[f"{name}_reservation"].append((reservations[ok, dim] / req).astype(np.float32))
            self.accuracy[f"{name}_usage"].append((np.nan_to_num(usage[ok, dim]) / req).astype(np.float32))

    def accuracy_arrays(self) -> dict[str, np.ndarray]:
        return {
            k: (np.concatenate(v) if v else np.zeros(0, dtype=np.float32)) for k, v in self.accuracy.items()
        }
