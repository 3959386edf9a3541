"""Which of seed 003's fragments a question falls in, and so which procedure answers it.

* ``AAS`` (§4): the target type has no required affinity term; decided by ``Hard(t*, n*, 0)``
  or "already running", in polynomial time.
* ``affinity/anti-affinity`` (§5): affinity, no binding capacity, no spread; BFS over supports.
* ``affinity + capacity`` (§6): affinity and a capacity that can bind; BFS over supports with
  capacity rows.
* ``spread (counted)``: a hard spread constraint counts instances; BFS over bounded counters.


Why the polynomial test needs only the target's own terms: without affinity every part of
``Hard(t*, n*, sigma)`` is anti-monotone in the running pods except the spread minimum, and
in the empty configuration every skew is ``[t matches s] - 0 <= 1 <= maxSkew`` (seed 003 §4),
so ``Hard(t*, n*, sigma)`` for any ``sigma`` implies ``Hard(t*, n*, 0)``; conversely every pod
can be deleted. Capacity does not change this argument (``used(sigma) >= 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kalena.deployability.relevance import Relevance
from kalena.deployability.tables import Tables


@dataclass(frozen=True, slots=True)
class Fragment:
    name: str
    section: str
    polynomial: bool
    affinity: bool = False
    anti_affinity: bool = False
    capacity_binds: bool = False
    spread: bool = False

    def describe(self) -> str:
        flags = [
            name
            for name, on in (
                ("affinity", self.affinity),
                ("anti-affinity", self.anti_affinity),
                ("binding capacity", self.capacity_binds),
                ("topology spread", self.spread),
            )
            if on
        ]
        kind = "polynomial" if self.polynomial else "PSPACE-complete in general"
        return f"{self.name} (seed 003 {self.section}; {kind}; active: {', '.join(flags) or 'none'})"


AAS = Fragment("AAS: no required affinity on the target", "§4", polynomial=True)


def _capacity_binds(tb: Tables, rel: Relevance) -> bool:
    """Some node's bounded dimension could be exceeded if every relevant pair ran once."""
    per_node: dict[int, dict[str, int]] = {}
    for u, m in rel.deployable | rel.blocking | rel.pairs:
        alloc = tb.nodes[m].allocatable
        acc = per_node.setdefault(m, {})
        for d, v in tb.types[u].requests.items():
            if d in alloc and v > 0:
                acc[d] = acc.get(d, 0) + v
    return any(v > tb.nodes[m].allocatable[d] for m, acc in per_node.items() for d, v in acc.items())


def classify(tb: Tables, rel: Relevance) -> Fragment:
    """The fragment of the relevant part of an instance (for a question that needs the search)."""
    types = {u for u, _ in rel.deployable}
    aff = any(tb.types[u].affinity for u in types)
    anti = any(tb.types[u].anti_affinity or tb.sym_anti(u) for u in types)
    cap = _capacity_binds(tb, rel)
    spread = any(tb.types[u].spread for u in types)
    if spread:
        name, section = "spread (counted instances)", "§2.4, bounded counters (§3)"
    elif cap:
        name, section = "affinity + capacity", "§6"
    elif aff:
        name, section = "affinity/anti-affinity, capacity-free", "§5"
    else:
        name, section = "no affinity among relevant types", "§4"
    return Fragment(name, section, False, aff, anti, cap, spread)
