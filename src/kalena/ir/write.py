"""Writing documents as IR v1 text, deterministically, and to disk atomically.

The emitter is hand-written rather than ``yaml.dump`` so that the bytes depend only on the
document (not on whether PyYAML has libyaml): writing, reading back and writing again gives
identical bytes. Conventions:

* header ``apiVersion: kuberina.io/v1`` and ``kind`` first; keys in the order of the IR v1 spec;
* resource blocks in flow style with only the written dimensions, nested ``disk``/``network``;
* numbers in IR units: integral values without a decimal point (``64``), others as the
  shortest decimal that reads back to the same float (``0.25``, never ``1e-05``, which
  PyYAML would read as a string and the quantity parser as bytes);
* strings plain when YAML reads them back as the same string, else JSON-quoted;
* optional things that are absent or empty are omitted (``replicas`` is always written).

The writer expects v1-ready documents (full ``namespace/pod`` blueprint keys, no legacy pod
entries); :func:`kalena.ir.convert.to_v1` produces them from legacy ones.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path

from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from kalena.ir.document import BlueprintDoc, Dims, Document, InfraDoc, ObservedDoc, WorkloadsDoc
from kalena.ir.schema_v1 import API_VERSION

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_RESOLVER = Resolver()
_STR_TAG = "tag:yaml.org,2002:str"


def scalar(s: str) -> str:
    """A string as a YAML scalar that reads back as exactly this string."""
    if _PLAIN.match(s) and _RESOLVER.resolve(ScalarNode, s, (True, False)) == _STR_TAG:
        return s
    return _json_string(s)


def _json_string(s: str) -> str:
    out = ['"']
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or c == "\x7f":
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def number(v: float) -> str:
    """Shortest exact decimal, no exponent: 64.0 -> ``64``, 1e-05 -> ``0.00001``."""
    if v.is_integer():
        return str(int(v))
    return format(Decimal(repr(v)), "f")


def resource_flow(dims: Dims) -> str:
    """``{cpu: 6, ram: 24, disk: {read: 5, write: 3}}`` with only the written dimensions."""
    parts = [f"{d}: {number(dims[d])}" for d in ("cpu", "ram", "gpu", "storage") if d in dims]
    for block, keys in (("disk", ("read", "write")), ("network", ("in", "out"))):
        inner = [f"{k}: {number(dims[f'{block}.{k}'])}" for k in keys if f"{block}.{k}" in dims]
        if inner:
            parts.append(f"{block}: {{{', '.join(inner)}}}")
    return "{" + ", ".join(parts) + "}"


def _map_block(out: list[str], indent: str, key: str, mapping: Mapping[str, str]) -> None:
    if mapping:
        out.append(f"{indent}{key}:")
        out.extend(f"{indent}  {scalar(k)}: {scalar(v)}" for k, v in mapping.items())


def _list_block(out: list[str], indent: str, key: str, items: Iterable[str]) -> None:
    items = list(items)
    if items:
        out.append(f"{indent}{key}:")
        out.extend(f"{indent}  - {scalar(i)}" for i in items)


def _flow_map(pairs: Iterable[tuple[str, str | None]]) -> str:
    return "{" + ", ".join(f"{k}: {scalar(v)}" for k, v in pairs if v is not None) + "}"


def _header(kind: str) -> list[str]:
    return [f"apiVersion: {API_VERSION}", f"kind: {kind}"]


def dump_infra(doc: InfraDoc) -> str:
    out = _header("Infrastructure")
    out.append("nodes:" if doc.nodes else "nodes: []")
    for n in doc.nodes:
        out.append(f"  - name: {scalar(n.name)}")
        if n.zone:
            out.append(f"    zone: {scalar(n.zone)}")
        if n.rack:
            out.append(f"    rack: {scalar(n.rack)}")
        _map_block(out, "    ", "labels", n.labels)
        if n.taints:
            out.append("    taints:")
            for t in n.taints:
                pairs = (("key", t.key), ("value", t.value or None), ("effect", t.effect or None))
                out.append(f"      - {_flow_map(pairs)}")
        if n.allocatable:
            out.append(f"    allocatable: {resource_flow(n.allocatable)}")
    if doc.daemonsets:
        out.append("daemonsets:")
        for d in doc.daemonsets:
            out.append(f"  - name: {scalar(d.name)}")
            if d.resources:
                out.append(f"    resources: {resource_flow(d.resources)}")
            _map_block(out, "    ", "nodeSelector", d.node_selector)
            if d.tolerations:
                out.append(f"    tolerations: [{', '.join(scalar(t) for t in d.tolerations)}]")
    return "\n".join(out) + "\n"


def _observed(out: list[str], indent: str, o: ObservedDoc) -> None:
    out.append(f"{indent}observed:")
    if o.window:
        out.append(f"{indent}  window: {scalar(o.window)}")
    for name in ("p50", "p95", "p99", "peak"):
        dims = getattr(o, name)
        if dims is not None:  # an absent percentile stays absent; an empty one is written empty
            out.append(f"{indent}  {name}: {resource_flow(dims)}")
    out.append(f"{indent}  exceeded_request_fraction: {number(o.exceeded_request_fraction)}")


def dump_workloads(doc: WorkloadsDoc) -> str:
    if any(d.pod_entry for d in doc.declarations):
        raise ValueError("legacy pod entries must go through kalena.ir.convert.to_v1 before writing")
    out = _header("Workloads")
    by_ns: dict[str, list[int]] = {}
    for i, d in enumerate(doc.declarations):
        by_ns.setdefault(d.namespace, []).append(i)
    out.append("namespaces:" if by_ns else "namespaces: {}")
    for ns, idxs in by_ns.items():
        out.append(f"  {scalar(ns)}:")
        for i in idxs:
            d = doc.declarations[i]
            ind = "      "
            out.append(f"    - name: {scalar(d.name)}")
            out.append(f"{ind}replicas: {d.replicas}")
            if d.requests:
                out.append(f"{ind}requests: {resource_flow(d.requests)}")
            _map_block(out, ind, "nodeSelector", d.node_selector)
            if d.tolerations:
                out.append(f"{ind}tolerations:")
                for t in d.tolerations:
                    pairs = (
                        ("key", t.key),
                        ("operator", t.operator),
                        ("value", t.value),
                        ("effect", t.effect),
                    )
                    out.append(f"{ind}  - {_flow_map(pairs)}")
            _list_block(out, ind, "affinity", d.affinity)
            _list_block(out, ind, "antiAffinity", d.anti_affinity)
            if d.topology_spread is not None:
                s = d.topology_spread
                out.append(
                    f"{ind}topologySpread: {{maxSkew: {s.max_skew}, topologyKey: {scalar(s.topology_key)}}}"
                )
            if d.gang is not None:
                out.append(f"{ind}gang: {scalar(d.gang)}")
            if d.observed is not None:
                _observed(out, ind, d.observed)
    if doc.groups:
        out.append("groups:")
        for g in doc.groups:
            if g.members is None:
                raise ValueError(f"group {g.name!r} has no member list: convert with kalena.ir.convert.to_v1")
            out.append(f"  - name: {scalar(g.name)}")
            out.append("    members:" if g.members else "    members: []")
            out.extend(f"      - {scalar(m)}" for m in g.members)
            if g.min_members is not None:
                out.append(f"    min_members: {g.min_members}")
            if g.colocate is not None:
                out.append(f"    colocate: {'true' if g.colocate else 'false'}")
            if g.node_selector is not None:
                if g.node_selector:
                    _map_block(out, "    ", "nodeSelector", g.node_selector)
                else:
                    out.append("    nodeSelector: {}")
    return "\n".join(out) + "\n"


def dump_blueprint(doc: BlueprintDoc) -> str:
    if any("/" not in key for key, _ in doc.solution):
        raise ValueError("bare blueprint keys must go through kalena.ir.convert.to_v1 before writing")
    meta = doc.metadata
    feasible = meta.feasible if meta is not None and meta.feasible is not None else True
    out = _header("Blueprint")
    out.append("metadata:")
    out.append(f"  feasible: {'true' if feasible else 'false'}")
    out.append(f"  pods: {len(doc.solution)}")
    out.append(f"  activeNodes: {doc.active_nodes()}")
    out.append("solution:" if doc.solution else "solution: {}")
    out.extend(f"  {scalar(k)}: {scalar(v)}" for k, v in doc.solution)
    return "\n".join(out) + "\n"


def dump_document(doc: Document) -> str:
    """The document as IR v1 text."""
    if isinstance(doc, InfraDoc):
        return dump_infra(doc)
    if isinstance(doc, WorkloadsDoc):
        return dump_workloads(doc)
    return dump_blueprint(doc)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder and a rename.

    A reader (or a crash) sees either the old file or the complete new one, never half of it.
    """
    write_files_atomic({Path(path): text})


def _process_umask() -> int:
    mask = os.umask(0o022)  # read by setting it back: read once, at import (single-threaded then)
    os.umask(mask)
    return mask


_UMASK = _process_umask()


def _mode_for(target: Path) -> int:
    """The mode a new file would get (``0666`` less the umask); a file replaced keeps its own."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~_UMASK


def write_files_atomic(files: Mapping[Path, str | bytes], remove: Iterable[Path] = ()) -> None:
    """Write every file, or none: each is staged complete (written and synced) beside its target
    first, and only when all are staged are they renamed into place; then ``remove`` (stale
    outputs of an earlier run) is deleted. A new file gets the mode ``open`` would give it (the
    staging file's own ``0600`` is not kept); a replaced one keeps its mode.

    A failure while staging removes what was staged and raises ``OSError`` whose ``filename`` is
    the target given, never a temporary name. The renames themselves do not fail on one file system
    short of a crash, in which case each target is still either its old or its new content.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for target, content in files.items():
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            except OSError as e:
                raise OSError(e.errno, e.strerror, str(target)) from None
            staged.append((tmp, target))
            data = content.encode("utf-8") if isinstance(content, str) else content
            try:
                os.fchmod(fd, _mode_for(target))
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise OSError(e.errno, e.strerror, str(target)) from None
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise
    for tmp, target in staged:
        os.replace(tmp, target)
    for old in remove:
        if old not in files:
            old.unlink(missing_ok=True)


def write_document(doc: Document, path: str | Path) -> None:
    """Write one document as IR v1, atomically."""
    write_text_atomic(path, dump_document(doc))
