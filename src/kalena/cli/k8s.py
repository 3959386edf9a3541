"""``kalena k8s control-plane``: a real Kubernetes control plane on this machine, for people to try
Kalena against (the tests' harness, :mod:`kalena.testing.k8s`): etcd, kube-apiserver,
kube-scheduler and kwok on 127.0.0.1 with ``--nodes`` kwok nodes, until SIGINT or SIGTERM.
Exit codes: 0 stopped, 2 bad input, 3 the harness is not built, 4 a component failed.

``kalena k8s scheduler``: Kalena's secondary scheduler (:mod:`kalena.k8s.scheduler`). Exit codes:
0 stopped, 2 bad input (a kubeconfig that cannot be used), 3 the apiserver does not answer, 4 the
leader's lease was lost (``--leader-elect``: another replica leads; the Deployment restarts it).

``kalena k8s render``: Kalena's objects for a cluster (:mod:`kalena.k8s.render`). Exit codes: 0,
2 bad input.

``kalena k8s extender``: Kalena's scheduler extender for kube-scheduler (:mod:`kalena.k8s.extender`).
Exit codes: 0 stopped, 2 bad input, 3 the apiserver does not answer or the address cannot be served.

``kalena k8s agent``: the node agent, enforce-only, as the DaemonSet runs it (:mod:`kalena.k8s.agent`).
Exit codes: 0 stopped, 2 bad input (a kubeconfig, an option, a corrupt state file), 3 the apiserver
does not answer, the node is not in it, or the kubelet's cgroups are not on this host."""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from kubernetes.utils import parse_quantity

from kalena.cli import agent as agent_cli
from kalena.testing.k8s import BUILD_COMMAND, ControlPlane, ControlPlaneError, HarnessMissing, tail

app = typer.Typer(help="Kalena on Kubernetes.", no_args_is_help=True)

EXIT_NOT_BUILT = 3
EXIT_FAILED = 4
EXIT_LOST_LEASE = 4
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_NODES = 100_000


# the options the scheduler and the extender share
Kubeconfig = Annotated[
    Path | None,
    typer.Option("--kubeconfig", envvar="KUBECONFIG", help="The cluster (default: in-cluster config)."),
]
SchedulerName = Annotated[
    str, typer.Option("--name", help="The schedulerName whose pods are Kalena's (batch, bound or not).")
]
NodeSelector = Annotated[
    str | None, typer.Option("--node-selector", help="Kalena's nodes: these labels (key=value,...).")
]
InferBatch = Annotated[
    bool, typer.Option("--infer-batch", metavar="", help="Job and CronJob pods default to batch.")
]


@app.command("control-plane")
def control_plane(
    nodes: Annotated[int, typer.Option("--nodes", help="kwok nodes to make (0 or more).")] = 3,
    node_cpu: Annotated[str, typer.Option("--node-cpu", help="Each node's allocatable CPU.")] = "32",
    node_memory: Annotated[
        str, typer.Option("--node-memory", help="Each node's allocatable memory.")
    ] = "256Gi",
    node_pods: Annotated[str, typer.Option("--node-pods", help="Pods each node takes.")] = "110",
    work_dir: Annotated[
        Path | None,
        typer.Option("--dir", help="Keep data, certificates and logs here (default: a temporary folder)."),
    ] = None,
    bin_dir: Annotated[
        Path | None,
        typer.Option(
            "--bin-dir", help=f"The four binaries (default: $KALENA_K8S_BIN, else {BUILD_COMMAND}'s)."
        ),
    ] = None,
    duration: agent_cli.Duration = 0.0,
) -> None:
    """Start etcd, kube-apiserver, kube-scheduler and kwok on 127.0.0.1 until Ctrl-C."""
    problems = []
    if not 0 <= nodes <= MAX_NODES:
        problems.append(f"--nodes: must be 0 to {MAX_NODES} (value: {nodes})")
    for option, value in (
        ("--node-cpu", node_cpu),
        ("--node-memory", node_memory),
        ("--node-pods", node_pods),
    ):
        try:
            if parse_quantity(value) <= 0:
                problems.append(f"{option}: must be more than 0 (value: {value})")
        except ValueError:
            problems.append(f"{option}: not a Kubernetes quantity (value: {value})")
    if work_dir is not None and work_dir.exists() and not work_dir.is_dir():
        problems.append(f"--dir: not a folder (value: {work_dir})")
    if problems:
        raise agent_cli.fail_with(problems, agent_cli.EXIT_BAD_INPUT)
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    try:
        cp = ControlPlane(bin_dir=bin_dir, work_dir=work_dir)
    except HarnessMissing as e:
        raise agent_cli.fail_with([str(e)], EXIT_NOT_BUILT) from None
    should_stop = agent_cli.stop_on_signals(duration)
    try:
        try:
            cp.start()
            names = cp.add_nodes(nodes, cpu=node_cpu, memory=node_memory, pods=node_pods) if nodes else []
        except (ControlPlaneError, TimeoutError) as e:
            raise agent_cli.fail_with([f"kalena k8s control-plane: {e}"], EXIT_FAILED) from None
        up = cp.timings["scheduler_ready"]
        say = f"apiserver {cp.api_url} (ready in {up:.1f} s), {len(names)} kwok nodes Ready"
        typer.echo(f"kalena k8s control-plane: {say}")
        typer.echo(f"  export KUBECONFIG={cp.kubeconfig}    # the admin (system:masters)")
        typer.echo(
            f"  logs: {cp.work_dir / 'logs'}; Ctrl-C stops everything"
            + ("" if work_dir else " and removes it")
        )
        while not should_stop():
            dead = [p for p in cp.processes.values() if not p.alive()]
            if dead:
                lines = [
                    f"kalena k8s control-plane: {p.name} exited; its log ends:\n{tail(p.log)}" for p in dead
                ]
                raise agent_cli.fail_with(lines, EXIT_FAILED)
            time.sleep(0.2)
    finally:
        cp.stop()


@app.command("scheduler")
def scheduler(
    kubeconfig: Kubeconfig = None,
    name: SchedulerName = "kalena",
    node_selector: NodeSelector = None,
    infer_batch: InferBatch = False,
    every: Annotated[float, typer.Option("--every", help="Seconds between passes at most.")] = 1.0,
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect", metavar="", help="Run as one of several replicas: only the leader places."
        ),
    ] = False,
    lease_namespace: Annotated[
        str, typer.Option("--lease-namespace", help="The Lease's namespace.")
    ] = "kalena-system",
    lease_name: Annotated[str, typer.Option("--lease-name", help="The Lease's name.")] = "kalena-scheduler",
    lease_duration: Annotated[
        int, typer.Option("--lease-duration", help="Seconds a leader's lease lasts without renewal.")
    ] = 15,
    duration: agent_cli.Duration = 0.0,
) -> None:
    """Kalena's secondary scheduler: place pods with schedulerName kalena into the slack."""
    from kalena.k8s.scheduler import POOL, Scheduler

    if not every > 0:
        raise agent_cli.fail_with(
            [f"--every: must be more than 0 (value: {every})"], agent_cli.EXIT_BAD_INPUT
        )
    core = core_api(kubeconfig, pool=POOL)
    sched = Scheduler(
        core, name=name, node_selector=node_selector, infer_batch=infer_batch,
        log=lambda line: typer.echo(f"kalena k8s scheduler: {line}", err=True),
    )  # fmt: skip
    try:
        sched.sync()
    except Exception as e:  # the apiserver does not answer, or refuses us
        raise agent_cli.fail_with(
            [f"kalena k8s scheduler: the apiserver: {e}"], agent_cli.EXIT_HOST
        ) from None
    typer.echo(
        f"kalena k8s scheduler: {len(sched.nodes)} nodes, {len(sched.pods)} pods; placing {name}'s pods"
    )
    stop = _stop_event(duration)
    if not leader_elect:
        sched.run(stop, every)
        return
    lost = _lead(sched, stop, every, lease_namespace, lease_name, lease_duration)
    if lost:
        raise agent_cli.fail_with(
            [f"kalena k8s scheduler: lost the lease {lease_namespace}/{lease_name}: another replica leads"],
            EXIT_LOST_LEASE,
        )


class _Stopped(Exception):
    """The scheduler stopped while leading (not an error)."""


def _lead(sched: Any, stop: threading.Event, every: float, namespace: str, name: str, duration: int) -> bool:
    """Place only while this replica holds the Lease (the client library's election); returns
    whether the lease was lost (rather than the command stopped)."""
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    identity = f"{socket.gethostname()}-{os.getpid()}"
    lost = threading.Event()

    def lead() -> None:
        sched.run(stop, every)
        # stopped: raising is the library's one way to end its renewals (it logs it; quieted below)
        raise _Stopped()

    logging.getLogger("leaderelection").addFilter(
        lambda rec: not (rec.exc_info and isinstance(rec.exc_info[1], _Stopped))
    )
    renew = max(2, duration * 2 // 3)
    retry = max(1, min(2, (renew - 1) // 2))
    config = electionconfig.Config(
        LeaseLock(name, namespace, identity), lease_duration=duration, renew_deadline=renew,
        retry_period=retry, onstarted_leading=lead, onstopped_leading=lost.set,
    )  # fmt: skip
    typer.echo(f"kalena k8s scheduler: {identity} waits for the lease {namespace}/{name}", err=True)
    threading.Thread(target=leaderelection.LeaderElection(config).run, daemon=True).start()
    while not stop.is_set() and not lost.is_set():
        stop.wait(0.2)
    was_lost = lost.is_set()  # (not the user's stop: the election goes on renewing until we exit)
    stop.set()
    return was_lost


@app.command("render")
def render_cmd(
    namespace: Annotated[str, typer.Option("--namespace", help="Kalena's namespace.")] = "kalena-system",
    image: Annotated[
        str, typer.Option("--image", help="The image that has the kalena command.")
    ] = "kalena:latest",
    components: Annotated[
        str,
        typer.Option("--components", help="Which, comma-separated: scheduler, agent, extender, recommender."),
    ] = "scheduler,agent",
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write a kustomization into this folder (kubectl apply -k) instead."),
    ] = None,
    scheduler_config: Annotated[
        bool,
        typer.Option(
            "--scheduler-config",
            metavar="",
            help="Print the KubeSchedulerConfiguration that calls the extender.",
        ),
    ] = False,
) -> None:
    """Print Kalena's Kubernetes objects (namespace, NodeReservation CRD, each component's
    least-privilege RBAC, the leader-elected scheduler Deployment, the agent DaemonSet, the
    extender) as YAML, for kubectl apply -f -."""
    from kalena.k8s import render as r

    problems = []
    if not _DNS_LABEL.match(namespace):
        problems.append(f"--namespace: not a DNS label (value: {namespace!r})")
    if not image or any(c.isspace() for c in image):
        problems.append(f"--image: not an image reference (value: {image!r})")
    chosen = tuple(c.strip() for c in components.split(",") if c.strip())
    unknown = [c for c in chosen if c not in r.COMPONENTS]
    if unknown or not chosen:
        problems.append(f"--components: each one of {', '.join(r.COMPONENTS)} (value: {components!r})")
    if out is not None and out.exists() and not out.is_dir():
        problems.append(f"--out: must be a folder, and {out} is a file")
    if problems:
        raise agent_cli.fail_with(problems, agent_cli.EXIT_BAD_INPUT)
    if scheduler_config:
        typer.echo(yaml.safe_dump(r.scheduler_config(namespace), sort_keys=False), nl=False)
        return
    if out is None:
        typer.echo(r.render(namespace, image, chosen), nl=False)
        return
    try:
        written = r.write_kustomization(out, namespace, image, chosen)
    except OSError as e:
        raise agent_cli.fail_with([f"--out: {out}: {e.strerror or e}"], agent_cli.EXIT_BAD_INPUT) from None
    for path in written:
        typer.echo(str(path))


def core_api(kubeconfig: Path | None, pool: int | None = None) -> Any:
    """The API's client from ``kubeconfig`` (else the in-cluster config), with ``pool``
    connections kept (default: the client's, 5 a core); exit 2 if unusable."""
    from kubernetes import client as kclient
    from kubernetes import config as kconfig
    from kubernetes.config.config_exception import ConfigException

    try:
        if kubeconfig is not None:
            kconfig.load_kube_config(str(kubeconfig))
        else:
            kconfig.load_incluster_config()
    except (ConfigException, OSError, ValueError, TypeError, KeyError, yaml.YAMLError) as e:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config"
        raise agent_cli.fail_with([f"{where}: cannot be used: {e}"], agent_cli.EXIT_BAD_INPUT) from None
    if pool is None:
        return kclient.CoreV1Api()
    conf = kclient.Configuration.get_default_copy()
    conf.connection_pool_maxsize = pool
    return kclient.CoreV1Api(kclient.ApiClient(conf))


def _stop_event(duration: float) -> threading.Event:
    """Set by SIGINT, SIGTERM or ``--duration``, as for every long-running command."""
    should_stop = agent_cli.stop_on_signals(duration)
    stop = threading.Event()

    def until_stopped() -> None:
        while not should_stop():
            time.sleep(0.2)
        stop.set()

    threading.Thread(target=until_stopped, daemon=True).start()
    return stop


EXTENDER_LISTEN = "127.0.0.1:8471"


@app.command("agent")
def agent_cmd(
    kubeconfig: Kubeconfig = None,
    node: Annotated[
        str | None,
        typer.Option("--node", envvar="NODE_NAME", help="This node's name in the API (default: the host's)."),
    ] = None,
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="Folder of the state file and the action log.")
    ] = Path("/var/lib/kalena"),
    cgroup_driver: Annotated[
        str, typer.Option("--cgroup-driver", help="The kubelet's: auto, cgroupfs or systemd.")
    ] = "auto",
    kubelet_cgroup_root: Annotated[
        str, typer.Option("--kubelet-cgroup-root", help="The kubelet's --cgroup-root.")
    ] = "/",
    name: SchedulerName = "kalena",
    infer_batch: InferBatch = False,
    sample_interval: agent_cli.SampleInterval = 1.0,
    estimate_interval: agent_cli.EstimateInterval = 10.0,
    grace_period: agent_cli.GracePeriod = 30.0,
    min_run_time: agent_cli.MinRunTime = 120.0,
    escalation_rounds: agent_cli.EscalationRounds = 3,
    escalation_persist: agent_cli.EscalationPersist = 30.0,
    duration: agent_cli.Duration = 0.0,
    archive: Annotated[
        str | None,
        typer.Option(
            "--archive",
            metavar="WHERE",
            help="The usage archive this agent writes (an SQLite file or a postgresql:// URL; "
            "default: archive.db in --state-dir; 'none': no archive).",
        ),
    ] = None,
) -> None:
    """The node agent on Kubernetes (the DaemonSet's): throttle batch pods on pressure, evict them
    through the Eviction API, publish this node's NodeReservation."""
    from kalena.agent.declaration import DeclarationError
    from kalena.archive import ArchiveError
    from kalena.k8s.agent import build_k8s_agent
    from kalena.k8s.kubelet import DRIVERS, LayoutError

    bad = agent_cli.EXIT_BAD_INPUT
    if cgroup_driver not in DRIVERS:
        raise agent_cli.fail_with(
            [f"--cgroup-driver: must be one of {', '.join(DRIVERS)} (value: {cgroup_driver!r})"], bad
        )
    if not kubelet_cgroup_root.startswith("/"):
        raise agent_cli.fail_with(
            [f"--kubelet-cgroup-root: must be absolute (value: {kubelet_cgroup_root!r})"], bad
        )
    if state_dir.exists() and not state_dir.is_dir():
        raise agent_cli.fail_with([f"--state-dir: must be a folder, and {state_dir} is a file"], bad)
    config = agent_cli.agent_config(
        sample_interval, estimate_interval, grace_period, min_run_time, escalation_rounds, escalation_persist
    )
    here = node or socket.gethostname().lower()
    where_archive = None if archive == "none" else (archive or str(state_dir / "archive.db"))
    core = core_api(kubeconfig)

    def say(line: str) -> None:
        typer.echo(f"kalena k8s agent: {line}", err=True)

    try:
        agent, pods = build_k8s_agent(
            core, here, state_dir, config=config, driver=cgroup_driver, kubelet_root=kubelet_cgroup_root,
            name=name, infer_batch=infer_batch, log=say, archive=where_archive,
        )  # fmt: skip
    except ArchiveError as e:
        raise agent_cli.fail_with([f"--archive: {e}"], bad) from None
    except DeclarationError as e:
        raise agent_cli.fail_with([p.render() for p in e.problems], agent_cli.EXIT_HOST) from None
    except LayoutError as e:
        raise agent_cli.fail_with([f"the kubelet's cgroups: {e}"], agent_cli.EXIT_HOST) from None
    except Exception as e:  # the apiserver does not answer, or refuses us
        raise agent_cli.fail_with([f"kalena k8s agent: the apiserver: {e}"], agent_cli.EXIT_HOST) from None
    should_stop = agent_cli.stop_on_signals(duration)
    try:
        agent.start()
    except ValueError as e:  # a corrupt state file: never guessed at, never overwritten
        raise agent_cli.fail_with(
            [f"{state_dir / 'state.json'}: unreadable state file: {e}; move it away to start afresh"], bad
        ) from None
    stop = threading.Event()
    pods.start(stop)
    where = f"the kubelet's {pods.driver} cgroups under {agent.tree.root}"
    say(f"node {here}, {where}, {agent.tree.layout.describe()}")
    for line in agent.sources.report()["psi"]:
        say(("warning: " if "fallback" in line else "") + f"psi {line}")
    try:
        agent.run(should_stop=should_stop)
    finally:
        stop.set()
        agent.shutdown()
        agent.log.close()


@app.command("extender")
def extender_cmd(
    kubeconfig: Kubeconfig = None,
    listen: Annotated[
        str, typer.Option("--listen", help="HOST:PORT to serve kube-scheduler on (loopback by default).")
    ] = EXTENDER_LISTEN,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="A bearer token every call must carry.")
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="Serve HTTPS: the certificate.")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="Serve HTTPS: its key.")] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option("--tls-client-ca", help="Require client certificates of this CA (kube-scheduler's)."),
    ] = None,
    node_selector: NodeSelector = None,
    name: SchedulerName = "kalena",
    infer_batch: InferBatch = False,
    blueprint: Annotated[
        Path | None,
        typer.Option("--blueprint", help="A Kuberina IR v1 Blueprint: production is steered to its nodes."),
    ] = None,
    duration: agent_cli.Duration = 0.0,
) -> None:
    """Kalena's scheduler extender: kube-scheduler's filter and prioritize calls, answered by the core
    (batch against the reservation ledger, production toward the blueprint).

    Exit codes: 0 stopped, 2 bad input, 3 the apiserver does not answer or the address cannot be
    served."""
    from kalena.api.serve import ApiServer, BindRefused, check_bind, parse_listen
    from kalena.ir import IRError
    from kalena.k8s.cache import ClusterCache
    from kalena.k8s.extender import BlueprintPreference, Extender, make_app

    bad = agent_cli.EXIT_BAD_INPUT
    token = agent_cli.read_token(token_file, "--token-file") if token_file is not None else None
    if (tls_cert is None) != (tls_key is None):
        raise agent_cli.fail_with(["--tls-cert and --tls-key: give both or neither"], bad)
    if tls_client_ca is not None and tls_cert is None:
        raise agent_cli.fail_with(["--tls-client-ca: only with --tls-cert/--tls-key (HTTPS)"], bad)
    for f, opt in ((tls_cert, "--tls-cert"), (tls_key, "--tls-key"), (tls_client_ca, "--tls-client-ca")):
        if f is not None and not f.is_file():
            raise agent_cli.fail_with([f"{opt}: no such file (value: {str(f)!r})"], bad)
    try:
        where = parse_listen(listen)
        if where.socket is not None:
            raise BindRefused(
                f"--listen: kube-scheduler calls HOST:PORT, not a Unix socket (value: {listen!r})"
            )
        check_bind(where, token, client_ca=tls_client_ca is not None, tls="--tls-cert/--tls-key")
    except BindRefused as e:
        raise agent_cli.fail_with([str(e)], bad) from None
    preference = None
    if blueprint is not None:
        try:
            preference = BlueprintPreference.read(blueprint)
        except IRError as e:
            raise agent_cli.fail_with([p.render() for p in e.problems], bad) from None
    core = core_api(kubeconfig)
    cache = ClusterCache(
        core, name=name, node_selector=node_selector, infer_batch=infer_batch,
        log=lambda line: typer.echo(f"kalena k8s extender: {line}", err=True),
    )  # fmt: skip
    try:
        cache.sync()
    except Exception as e:  # the apiserver does not answer, or refuses us
        raise agent_cli.fail_with([f"kalena k8s extender: the apiserver: {e}"], agent_cli.EXIT_HOST) from None
    extender = Extender(cache, blueprint=preference)
    server = ApiServer(make_app(extender, token), where, tls_cert, tls_key, tls_client_ca)
    try:
        server.start()
    except OSError as e:
        raise agent_cli.fail_with([f"--listen: {where.describe()}: {e}"], agent_cli.EXIT_HOST) from None
    stop = _stop_event(duration)
    cache.watch_all(stop)
    extender.run(stop)  # the view rebuilt beside the calls, never in one
    scheme = "https" if tls_cert else "http"
    auth = [w for w, on in (("client certificates", tls_client_ca), ("a token", token)) if on]
    typer.echo(
        f"kalena k8s extender: {len(cache.nodes)} nodes, {len(cache.pods)} pods; serving "
        f"{scheme}://{where.describe()} (filter, prioritize)"
        + (f", requiring {' and '.join(auth)}" if auth else "")
        + (f"; blueprint {blueprint}" if blueprint else "")
    )
    try:
        stop.wait()
    finally:
        server.stop()  # the watches are daemon threads: each ends with its stream
