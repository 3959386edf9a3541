"""Kubernetes manifests (Node, Pod, workload templates, Namespace) read into core models.

A shell: it reads files. Today it builds the pod-deployability :class:`Instance`; the Kubernetes
shell will reuse it. Bad input raises :class:`kalena.ir.errors.IRError` with one problem per line.
"""

from kalena.manifests.load import POD_TYPE_ANNOTATION, parse_manifests, read_manifests

__all__ = ["POD_TYPE_ANNOTATION", "parse_manifests", "read_manifests"]
