"""Kuberina IR shell: read, check and write Infrastructure, Workloads and Blueprint documents.

Public API (see README.md in this folder for the file map and the rules):

* :func:`read_document`, :func:`parse_document`, :func:`read_documents`: one or more files
  to version-neutral documents, every problem collected into one :class:`IRError`;
* :class:`DocumentSet`, :func:`check_set`, :func:`build_cluster`, :func:`load_cluster`:
  cross-document checks and the core :class:`~kalena.core.cluster.Cluster`;
* :func:`to_v1` (a :class:`Conversion` with the rename map), :func:`dump_document`,
  :func:`write_document`: IR v1 output.
"""

from kalena.ir.build import DocumentSet, build_cluster, check_set, load_cluster
from kalena.ir.convert import Conversion, to_v1
from kalena.ir.errors import IRError, Problem
from kalena.ir.load import parse_document, read_document, read_documents
from kalena.ir.write import dump_document, write_document

__all__ = [
    "Conversion",
    "DocumentSet",
    "IRError",
    "Problem",
    "build_cluster",
    "check_set",
    "dump_document",
    "load_cluster",
    "parse_document",
    "read_document",
    "read_documents",
    "to_v1",
    "write_document",
]
