"""Generators of pod-deployability instances from the seed's hardness sources (a shell: writes files).

* :mod:`.pebbling` — bounded black pebbling -> instance (seed 003 §6); pyramids, binary trees, paths.
* :mod:`.petri` — 1-safe Petri-net coverability -> instance (seed 003 §5); PNML reader; families.
* :mod:`.kube_yaml` — any instance as Kubernetes YAML that ``kalena deployable`` reads back.
"""

from kalena.deployability_gen.kube_yaml import documents, to_yaml, write_yaml
from kalena.deployability_gen.pebbling import (
    PEBBLE,
    binary_tree,
    path,
    pebbling_instance,
    pyramid,
    read_node_list,
)
from kalena.deployability_gen.petri import (
    PetriNet,
    PNMLError,
    counter_net,
    fireability_goal,
    mutex_net,
    petri_instance,
    read_pnml,
    with_goal,
)

__all__ = [
    "PEBBLE",
    "PNMLError",
    "PetriNet",
    "binary_tree",
    "counter_net",
    "documents",
    "fireability_goal",
    "mutex_net",
    "path",
    "pebbling_instance",
    "petri_instance",
    "pyramid",
    "read_node_list",
    "read_pnml",
    "to_yaml",
    "with_goal",
    "write_yaml",
]
