"""Reading trace files: plain or gzip CSV, streamed row by row, with errors that name file and line."""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from pathlib import Path

from kalena.traces.model import TraceError


def open_text(path: Path) -> io.TextIOBase:
    """A text stream of ``path``, gunzipped when it ends in ``.gz``."""
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
        return open(path, encoding="utf-8", newline="")  # the caller closes it
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror or e}") from None


def csv_rows(path: Path, columns: int, *, header: bool = False) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of every row of a CSV file, streamed (a row at a time in memory).

    A row with fewer than ``columns`` fields is a :class:`TraceError` naming the file and line;
    extra fields are kept (a later schema may append columns). A corrupt gzip stream or bytes that
    are not UTF-8 are errors too, at the line where they are met.
    """
    with open_text(path) as f:
        reader = csv.reader(f)
        line = 0
        try:
            if header:
                next(reader, None)
                line = 1
            for row in reader:
                line += 1
                if not row:
                    continue
                if len(row) < columns:
                    got = len(row)
                    raise TraceError(f"{path}:{line}: {got} fields, expected {columns} (row: {row[:4]}...)")
                yield line, row
        except (OSError, EOFError, UnicodeDecodeError, csv.Error, gzip.BadGzipFile) as e:
            raise TraceError(f"{path}:{line + 1}: unreadable: {e}") from None


def number(path: Path, line: int, column: str, text: str, *, empty: float | None = None) -> float:
    """A field as a float; an empty field is ``empty`` where that is allowed, else an error."""
    if text == "":
        if empty is None:
            raise TraceError(f"{path}:{line}: {column}: missing value")
        return empty
    try:
        return float(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: {column}: not a number (value: {text!r})") from None


def find(root: Path, pattern: str, what: str) -> list[Path]:
    """The files under a trace directory matching ``pattern`` (sorted: part files in order);
    none is a :class:`TraceError` saying which table is missing."""
    found = sorted(p for p in root.glob(pattern) if p.is_file())
    if not found:
        raise TraceError(f"{root}: no {what} file (looked for {pattern})")
    return found
