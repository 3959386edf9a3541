"""The one relative tolerance of the core's float comparisons of quantities.

``REL_TOL = 1e-9``, used as ``total <= capacity + REL_TOL * max(1, |capacity|)`` (the request
ledger, the reservation-ledger fit rule, a node snapshot's ledger checks) and as the ``rtol`` and
``atol`` of the restoration invariant's drift check. Why 1e-9:

* above float noise: a per-node sum drifts by about one ulp (~1e-16 relative) per incremental
  add or remove between bulk recomputes, and sums of decimal fractions (0.1 + 0.2) or of a few
  hundred GiB values round at the same scale; 1e-9 absorbs a million such operations, so a sum
  that is exactly at capacity never reads as a breach;
* below any real quantity: 1e-9 of a 64-core node is 64 nano-cores, and even a millicore on a
  1,000-core node is 1e-6 relative, so no real request or overcommit hides inside the slack.

The ``max(1, |C|)`` keeps the slack absolute (1e-9 IR units) for capacities below one unit.
"""

from __future__ import annotations

REL_TOL = 1e-9
