"""Strict field validation of the Kubernetes objects Kalena reads, as ``kubectl --validate=strict``.

The schema is the official Kubernetes Python client's: every model class there
(``kubernetes.client.V1PodSpec`` ...) lists its fields (``attribute_map``: the JSON names) and
their types (``openapi_types``). An object is walked against it: a key that is no field of its
object is an error naming the file and the key path (``spec.tolerationz``), so a misspelling can
no longer drop a constraint and change the answer; a value of the wrong type (a string where a
list belongs, a number where a string belongs) is an error too. ``null`` is accepted for any
field, as the API server does. The fields Kalena models are read by :mod:`kalena.manifests.load`;
every other field of the schema is accepted and has no effect.

The client is imported on first use (about half a second): only readers of manifests pay for it.
"""

from __future__ import annotations

import datetime
import functools
import re
from typing import Any

from kalena.ir.errors import ProblemLog
from kalena.manifests.fields import Loc

#: The model of each kind that is checked (other kinds, a Service or a ConfigMap, are not read).
KIND_MODELS = {
    "Pod": "V1Pod",
    "Node": "V1Node",
    "Namespace": "V1Namespace",
    "Deployment": "V1Deployment",
    "StatefulSet": "V1StatefulSet",
    "DaemonSet": "V1DaemonSet",
    "ReplicaSet": "V1ReplicaSet",
    "ReplicationController": "V1ReplicationController",
    "Job": "V1Job",
    "CronJob": "V1CronJob",
}

#: Maps of quantities: the API takes a number as well as a string there (``cpu: 2``).
_QUANTITY_MAPS = frozenset({"limits", "requests", "capacity", "allocatable", "overhead", "hard", "used"})
_VERSION = re.compile(r"^(?:V\d+(?:alpha\d+|beta\d+)?|Core(?:V\d+)?)")
_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    # a timestamp: YAML reads an unquoted one as a datetime
    "datetime": (str, datetime.datetime, datetime.date),
    "date": (str, datetime.date),
}
_WHAT = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false"}


@functools.cache
def _models() -> Any:
    import kubernetes.client.models as models

    return models


@functools.cache
def _fields(model: str) -> dict[str, str]:
    """JSON field name -> type name, for one model of the client."""
    cls = getattr(_models(), model)
    return {cls.attribute_map[attr]: typ for attr, typ in cls.openapi_types.items()}


def client_version() -> str:
    import kubernetes

    return str(kubernetes.__version__)


def check_object(obj: dict[str, Any], kind: str, loc: Loc, log: ProblemLog) -> None:
    """Log every unknown field and every value of the wrong type in ``obj`` (a ``kind`` object)."""
    model = KIND_MODELS.get(kind)
    if model is not None:
        _check(obj, model, loc, log, key="")


def _check(value: Any, typ: str, loc: Loc, log: ProblemLog, key: str) -> None:
    if value is None:
        return  # null: the field is unset, as the API server reads it
    m = _LIST.match(typ)
    if m is not None:
        if not isinstance(value, list):
            log.add(loc, "must be a list", value)
            return
        for i, item in enumerate(value):
            _check(item, m.group(1), (*loc, i), log, key)
        return
    m = _DICT.match(typ)
    if m is not None:
        if not isinstance(value, dict):
            log.add(loc, "must be a mapping", value)
            return
        inner = m.group(1)
        for k, v in value.items():
            if not isinstance(k, str):
                log.add((*loc, str(k)), "keys must be strings", k)
            elif (
                inner == "str"
                and key in _QUANTITY_MAPS
                and isinstance(v, int | float)
                and not isinstance(v, bool)
            ):
                continue  # a quantity written as a number
            else:
                _check(v, inner, (*loc, k), log, k)
        return
    if typ == "object":
        return  # int-or-string, raw JSON: any value
    kinds = _SCALARS.get(typ)
    if kinds is not None:
        ok = isinstance(value, kinds) and (typ == "bool" or not isinstance(value, bool))
        if not ok:
            hint = " (quote it)" if typ == "str" and isinstance(value, int | float) else ""
            log.add(loc, f"must be {_WHAT.get(typ, 'a ' + typ)}{hint}", value)
        return
    fields = _fields(typ)
    if not isinstance(value, dict):
        log.add(loc, "must be a mapping", value)
        return
    for k, v in value.items():
        if not isinstance(k, str):
            log.add((*loc, str(k)), "keys must be strings", k)
            continue
        sub = fields.get(k)
        if sub is None:
            log.add((*loc, k), f"unknown field {k!r} (not a field of {_VERSION.sub('', typ)})")
            continue
        _check(v, sub, (*loc, k), log, k)
