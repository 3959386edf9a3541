"""Reading YAML safely: a bounded read, anchors resolved within bounds, duplicate keys caught.

Every reader of a file a user writes (IR documents, Kubernetes manifests, the node agent's
declaration) comes through here, so every one of them has the same bounds:

* a file is at most :data:`MAX_FILE_BYTES` (64 MiB) and UTF-8 text (else the byte offset of the
  first bad byte is named);
* collections nest at most :data:`MAX_DEPTH` (100) levels (Kubernetes objects need about 15);
* a document holds at most :data:`MAX_VALUES` (1,000,000) values once every alias is expanded,
  and no alias may refer to the node that contains it. YAML builds an alias as a shared object,
  so a 1 KB "billion laughs" file loads at once, but every reader that walks it then does the
  expanded amount of work; counting from the parser's events (linear in the text) stops it first;
* a key repeated in one mapping is reported, because YAML silently keeps the last one and a
  blueprint could lose a pod that way.

Job files are JSON: :func:`parse_json` holds them to the same depth and size.

Uses libyaml's C parser when PyYAML was built with it (about 4x faster on the 415 KB Irina
workloads) and the pure-Python parser otherwise; both build only plain data (``safe_load``
semantics).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    ScalarEvent,
)
from yaml.nodes import MappingNode

from kalena.ir.errors import DOCUMENT, MISSING, ProblemLog

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"

#: The largest input file read, in bytes.
MAX_FILE_BYTES = 64 * 2**20
#: The deepest nesting of mappings and sequences.
MAX_DEPTH = 100
#: The most values (scalars, mappings, sequences) one file may hold with its aliases expanded.
MAX_VALUES = 1_000_000


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """A safe loader that records duplicate mapping keys instead of silently dropping one."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[Any, int]] = []

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue  # merge keys legitimately repeat and override
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    self.duplicates.append((key, key_node.start_mark.line + 1))
                seen.add(key)
            except TypeError:  # unhashable key: the base constructor reports it
                pass
        return SafeConstructor.construct_mapping(self, node, deep=deep)


def read_text(path: str | Path, log: ProblemLog, max_bytes: int = MAX_FILE_BYTES) -> str | None:
    """The file's UTF-8 text, or ``None`` with a problem logged (missing, unreadable, too large, not text).

    At most ``max_bytes + 1`` bytes are read, whatever the file is (a device such as ``/dev/zero``
    or a pipe included).
    """
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        log.add(DOCUMENT, "file does not exist")
        return None
    except IsADirectoryError:
        log.add(DOCUMENT, "is a directory, not a file")
        return None
    except PermissionError:
        log.add(DOCUMENT, "file is not readable (permission denied)")
        return None
    except OSError as e:
        log.add(DOCUMENT, f"cannot read file: {e.strerror or e}")
        return None
    if len(raw) > max_bytes:
        log.add(DOCUMENT, f"file is larger than {_size(max_bytes)}, the limit for one input file")
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        log.add(DOCUMENT, f"file is not UTF-8 text (byte {e.start})", raw[e.start : e.start + 1].hex())
        return None


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


def check_bounds(
    text: str, log: ProblemLog, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES
) -> bool:
    """Nesting depth and expanded size from the parser's events, before anything is built.

    Each value counts 1 and each alias the size of the node it names, so the count is the number of
    values a reader walking the loaded data meets. Logs one problem and returns False when a
    bound is broken (or the text is not YAML, as :func:`parse_yaml` would say).
    """
    loader = _BaseLoader(text)
    anchors: dict[str, int] = {}  # finished anchored nodes: their expanded size
    open_anchors: set[str] = set()
    stack: list[list[Any]] = []  # open collections: [size so far, anchor]
    total = 0
    try:
        while loader.check_event():
            e = loader.get_event()
            if isinstance(e, ScalarEvent | AliasEvent):
                if isinstance(e, AliasEvent):
                    if e.anchor in open_anchors:
                        log.add(
                            DOCUMENT,
                            f"alias *{e.anchor} at line {_line(e)} is inside the node it names (a cycle)",
                        )
                        return False
                    size = anchors.get(e.anchor, 0)  # an undefined alias: the composer says so
                else:
                    size = 1
                    if e.anchor is not None:
                        anchors[e.anchor] = 1
            elif isinstance(e, CollectionStartEvent):
                if len(stack) >= max_depth:
                    log.add(DOCUMENT, f"nesting deeper than {max_depth} levels at line {_line(e)}")
                    return False
                stack.append([1, e.anchor])
                if e.anchor is not None:
                    open_anchors.add(e.anchor)
                continue
            elif isinstance(e, CollectionEndEvent):
                size, anchor = stack.pop()
                if anchor is not None:
                    anchors[anchor] = size
                    open_anchors.discard(anchor)
            else:
                if isinstance(e, DocumentStartEvent):
                    anchors.clear()  # anchors are per document
                continue
            if stack:  # a collection's size reaches its parent when it ends, checked there again
                stack[-1][0] += size
                count = stack[-1][0]
            else:
                total += size
                count = total
            if count > max_values:
                log.add(
                    DOCUMENT,
                    f"more than {max_values:,} values once aliases are expanded (line {_line(e)}): "
                    "an alias bomb?",
                )
                return False
    except yaml.YAMLError as e:
        _syntax(e, text, log)
        return False
    finally:
        loader.dispose()
    return True


def _line(event: Any) -> int:
    return int(event.start_mark.line) + 1 if event.start_mark is not None else 0


def _syntax(e: yaml.YAMLError, text: str, log: ProblemLog) -> None:
    """A parser's error as one problem with line and column."""
    if isinstance(e, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other controls)
        log.add(
            DOCUMENT, f"character U+{e.character:04X} at position {e.position} is not allowed in YAML text"
        )
    elif isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        parts = [x for x in (e.context, e.problem) if x]
        problem = ", ".join(parts) if parts else "invalid YAML"
        if mark is not None:
            lines = text.splitlines()
            line = lines[mark.line].strip() if 0 <= mark.line < len(lines) else ""
            log.add(
                DOCUMENT,
                f"YAML syntax error at line {mark.line + 1}, column {mark.column + 1}: {problem}",
                line or MISSING,
            )
        else:
            log.add(DOCUMENT, f"YAML syntax error: {problem}")
    else:
        log.add(DOCUMENT, "YAML error: " + " ".join(str(e).split()))


def parse_yaml(text: str, log: ProblemLog) -> tuple[bool, Any]:
    """``(ok, data)``: one YAML document as plain data, within the module's bounds; every problem
    (syntax with line and column, a bound, a duplicate key) is logged."""
    ok, docs = _parse(text, log, single=True)
    return ok, (docs[0] if ok else None)


def parse_yaml_all(text: str, log: ProblemLog) -> tuple[bool, list[Any]]:
    """``(ok, documents)``: every document of a multi-document stream (``---``), as :func:`parse_yaml`."""
    return _parse(text, log, single=False)


def _parse(text: str, log: ProblemLog, single: bool) -> tuple[bool, list[Any]]:
    if not check_bounds(text, log):
        return False, []
    loader = _Loader(text)
    try:
        if single:
            docs = [loader.get_single_data()]
        else:
            docs = []
            while loader.check_data():
                docs.append(loader.get_data())
    except yaml.YAMLError as e:
        _syntax(e, text, log)
        return False, []
    except ValueError as e:  # the constructor's own refusals, e.g. an integer of over 4300 digits
        log.add(DOCUMENT, f"a value YAML cannot build: {' '.join(str(e).split(';')[0].split())}")
        return False, []
    finally:
        loader.dispose()
    for key, line in loader.duplicates:
        log.add(DOCUMENT, f"duplicate key at line {line} (YAML would keep only the last)", key)
    return True, docs


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, log: ProblemLog) -> tuple[bool, Any]:
    """``(ok, data)``: one JSON value within the module's bounds (depth, values); ``NaN`` and
    ``Infinity`` (not JSON) and a key repeated in one object are refused; every problem is logged,
    a syntax error with line and column."""
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                repeated.append(k)
            out[k] = v
        return out

    try:
        data = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        log.add(DOCUMENT, f"JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}")
        return False, None
    except RecursionError:
        log.add(DOCUMENT, f"nesting deeper than {MAX_DEPTH} levels")
        return False, None
    except ValueError as e:  # a constant refused, an integer of over 4300 digits
        log.add(DOCUMENT, f"not JSON: {' '.join(str(e).split(';')[0].split())}")
        return False, None
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while stack:  # iterative: the depth is what is being checked
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH:
            log.add(DOCUMENT, f"nesting deeper than {MAX_DEPTH} levels")
            return False, None
        if seen > MAX_VALUES:
            log.add(DOCUMENT, f"more than {MAX_VALUES:,} values")
            return False, None
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    for key in repeated:
        log.add(DOCUMENT, "duplicate key (JSON would keep only the last)", key)
    return not repeated, data
