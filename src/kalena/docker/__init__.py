"""Kalena on Docker hosts and Swarm: the node agent's Docker ports, the cluster daemon, sizing.

``labels`` (containers -> workloads), ``engine`` (the Engine API through the Docker SDK),
``cgroups`` (a container's cgroup; where batch containers go), ``declarations`` (the node's
declaration from its running containers), ``runtime`` (batch runs as containers), ``enforcer``
(production caps through ``docker update``), ``agent`` (the wiring), ``cluster`` and ``join``
(the daemon over several hosts), ``sizing`` (the Stationkeeper's sizes on services and containers).
"""

#: The engine of a host whose ``DOCKER_HOST`` is unset (here, not in ``engine``: the CLI names it
#: in its options without importing the Docker SDK).
DEFAULT_ENDPOINT = "unix:///var/run/docker.sock"
