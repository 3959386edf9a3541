"""Which resident workloads a :class:`~kalena.core.model.Selector` matches, without scanning them all.

Anti-affinity and topology spread ask "which residents match this selector?" once per candidate
pod. Scanning 50,000 residents per question is too slow, so residents are indexed by every
identity spelling (``WorkloadSpec.identities()``) and by every ``(label key, value)`` pair. The
answer is exactly ``{k : selector.matches(spec_k)}``: names match any identity, or every
``match_labels`` pair is present (an empty selector matches nothing).
"""

from __future__ import annotations

from kalena.core.model import Selector, WorkloadSpec

_NONE: frozenset[int] = frozenset()


class ResidentIndex:
    """Identity and label postings for integer keys (ledger rows, or a pass's own placements)."""

    __slots__ = ("_by_label", "_by_name")

    def __init__(self) -> None:
        self._by_name: dict[str, set[int]] = {}
        self._by_label: dict[tuple[str, str], set[int]] = {}

    def add(self, key: int, spec: WorkloadSpec) -> None:
        for ident in spec.identities():
            self._by_name.setdefault(ident, set()).add(key)
        for pair in spec.labels.items():
            self._by_label.setdefault(pair, set()).add(key)

    def remove(self, key: int, spec: WorkloadSpec) -> None:
        for ident in spec.identities():
            posting = self._by_name[ident]
            posting.discard(key)
            if not posting:
                del self._by_name[ident]
        for pair in spec.labels.items():
            posting = self._by_label[pair]
            posting.discard(key)
            if not posting:
                del self._by_label[pair]

    def match(self, selector: Selector) -> set[int] | frozenset[int]:
        """Keys whose spec ``selector.matches``; the returned set must not be mutated."""
        hits: set[int] | frozenset[int] = _NONE
        if selector.names:
            found: set[int] = set()
            for name in selector.names:
                found |= self._by_name.get(name, _NONE)
            hits = found
        if selector.match_labels:
            # Intersect postings smallest first; a missing pair means no resident matches.
            postings = [self._by_label.get(pair, _NONE) for pair in selector.match_labels.items()]
            postings.sort(key=len)
            both = set(postings[0])
            for p in postings[1:]:
                both &= p
                if not both:
                    break
            hits = both if not hits else set(hits) | both
        return hits
