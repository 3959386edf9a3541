"""The Linux node agent (seed 000 §3, SPEC: Enforcement on the node): a shell around the core.

It reads usage and pressure from the kernel (cgroup v1, v2 or hybrid; PSI triggers; memory
events), feeds the core's estimator and enforcement policies, and carries out their decisions
on real cgroups through one audited writer. See README.md for the file map.
"""
