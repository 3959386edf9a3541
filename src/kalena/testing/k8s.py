"""A real Kubernetes control plane for tests and large-scale runs, on 127.0.0.1.

:class:`ControlPlane` starts etcd, kube-apiserver, kube-scheduler and kwok, built from upstream
Go modules by ``scripts/build-k8s-harness.sh`` (``harness/k8s``), and tears them down. Nothing is
faked above kwok: the apiserver serves TLS from a CA made here, authenticates client certificates
and authorises with ``Node,RBAC``; the real kube-scheduler binds pods; kwok plays the kubelet of
the nodes it manages (those annotated ``kwok.x-k8s.io/node: fake``) through the Stage objects below.

There is no kube-controller-manager, so nothing runs that it would: no Deployment or Job makes
pods, no namespace is ever finalised, no service-account token is minted. Two of its effects are
stood in for: the ``TaintNodesByCondition`` admission plugin is disabled (no controller would lift
the ``not-ready`` taint it puts on new nodes), and :meth:`ControlPlane.ensure_namespace` makes the
``default`` ServiceAccount that pods need to be admitted.

Each process runs in its own process group, with its output in a log file under the work folder
(shown in the error when it fails to start); :meth:`ControlPlane.stop` ends every group, and on
Linux each process is also killed when the process that started it dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import yaml
from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.client.rest import ApiException

BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")
BUILD_COMMAND = "scripts/build-k8s-harness.sh"
#: the repository when Kalena runs from a checkout (src/kalena/testing/k8s.py)
REPO = Path(__file__).resolve().parents[3]
GO_SUM = REPO / "harness" / "k8s" / "go.sum"

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
ADMIN_USER = "kalena-harness-admin"
SCHEDULER_USER = "system:kube-scheduler"  # the name the bootstrap RBAC binds kube-scheduler's role to
KWOK_USER = "kalena-harness-kwok"
CERT_DAYS = 30
RBAC_GROUP = "rbac.authorization.k8s.io"

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (the message has the logs' last lines)."""


class HarnessMissing(ControlPlaneError):
    """The binaries are not built: the message names the missing ones and the command that builds them."""


# --- where the binaries are


def cache_root() -> Path:
    """``$KALENA_K8S_CACHE``, else ``~/.cache/kalena/k8s-harness`` (as the build script)."""
    env = os.environ.get("KALENA_K8S_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kalena" / "k8s-harness"


def default_bin_dir() -> Path:
    """``$KALENA_K8S_BIN``, else the build script's folder for this checkout's ``go.sum``."""
    env = os.environ.get("KALENA_K8S_BIN")
    if env:
        return Path(env)
    if not GO_SUM.is_file():
        raise HarnessMissing(
            f"no harness/k8s/go.sum beside this Kalena ({REPO}): run from a checkout, or set "
            "KALENA_K8S_BIN to a folder holding " + ", ".join(BINARIES)
        )
    return cache_root() / hashlib.sha256(GO_SUM.read_bytes()).hexdigest() / "bin"


def missing_binaries(bin_dir: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]


def find_binaries(bin_dir: Path | None = None) -> Path:
    """The folder of the four binaries, or :class:`HarnessMissing` saying what to run."""
    where = bin_dir if bin_dir is not None else default_bin_dir()
    missing = missing_binaries(where)
    if missing:
        raise HarnessMissing(
            f"the Kubernetes test harness is not built: {', '.join(missing)} missing in {where}; "
            f"build it with {BUILD_COMMAND} (a cold build takes minutes)"
        )
    return where


def harness_missing() -> str | None:
    """Why the harness cannot run here (:func:`find_binaries`'s message), or None: for a skip mark."""
    try:
        find_binaries()
    except HarnessMissing as e:
        return str(e)
    return None


# --- certificates (the openssl command line: no Python dependency)


def _openssl(*args: str) -> None:
    r = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {r.stderr.strip()}")


def _subject(cn: str, orgs: Sequence[str]) -> str:
    """An openssl ``-subj``: one O per group (Kubernetes' groups), then the CN (the user name)."""

    def esc(v: str) -> str:
        return "".join("\\" + c if c in "\\/+=" else c for c in v)

    return "".join(f"/O={esc(o)}" for o in orgs) + f"/CN={esc(cn)}"


class Pki:
    """A CA (EC P-256) in ``folder`` and the certificates it signs."""

    def __init__(self, folder: Path, ca: str = "ca") -> None:
        if shutil.which("openssl") is None:
            raise ControlPlaneError("no openssl here (apt-get install openssl): it makes the harness's CA")
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = folder / f"{ca}.pem", folder / f"{ca}-key.pem"
        _openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-days", str(CERT_DAYS), "-subj", f"/CN=kalena-harness-{ca}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-keyout", str(self.ca_key), "-out", str(self.ca))  # fmt: skip

    def issue(
        self, name: str, cn: str, orgs: Sequence[str] = (), server_ips: Sequence[str] = ()
    ) -> tuple[Path, Path]:
        """``(cert, key)`` for ``cn`` in ``orgs``; a server's as well with ``server_ips``."""
        cert, key = self.folder / f"{name}.pem", self.folder / f"{name}-key.pem"
        csr, ext = self.folder / f"{name}.csr", self.folder / f"{name}.ext"
        usage = "serverAuth,clientAuth" if server_ips else "clientAuth"
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature",
                 f"extendedKeyUsage={usage}"]  # fmt: skip
        if server_ips:
            names = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
            sans = [f"IP:{ip}" for ip in server_ips] + [f"DNS:{n}" for n in names]
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-subj", _subject(cn, orgs), "-keyout", str(key), "-out", str(csr))  # fmt: skip
        # a random serial: two certificates of one CA must never share one
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
                 "-set_serial", f"0x{secrets.randbits(63):x}", "-days", str(CERT_DAYS),
                 "-extfile", str(ext), "-out", str(cert))  # fmt: skip
        csr.unlink()
        ext.unlink()
        return cert, key

    def signing_key(self, name: str) -> tuple[Path, Path]:
        """``(private, public)`` EC keys: the apiserver signs service-account tokens with it."""
        private, public = self.folder / f"{name}.key", self.folder / f"{name}.pub"
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(private))
        _openssl("pkey", "-in", str(private), "-pubout", "-out", str(public))
        return private, public


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> Path:
    context = f"{user}@kalena-harness"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "kalena-harness", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": context, "context": {"cluster": "kalena-harness", "user": user}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# --- kwok's stages (written for this harness: the fewest steps that make nodes Ready and pods Running)

_NODE_READY = """\
{{- $now := Now | Quote }}
phase: Running
conditions:
- type: Ready
  status: "True"
  reason: KwokReady
  message: kwok plays this node's kubelet (Kalena's test harness)
  lastHeartbeatTime: {{ $now }}
  lastTransitionTime: {{ $now }}
{{- range list "MemoryPressure" "DiskPressure" "PIDPressure" }}
- type: {{ . }}
  status: "False"
  reason: KwokNo{{ . }}
  lastHeartbeatTime: {{ $now }}
  lastTransitionTime: {{ $now }}
{{- end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: kwok
"""

# a strategic merge patch: only the Ready condition's heartbeat moves
_NODE_HEARTBEAT = """\
conditions:
- type: Ready
  status: "True"
  lastHeartbeatTime: {{ Now | Quote }}
"""

_POD_RUNNING = """\
{{- $now := Now | Quote }}
phase: Running
startTime: {{ $now }}
conditions:
{{- range list "Initialized" "ContainersReady" "Ready" }}
- type: {{ . }}
  status: "True"
  lastTransitionTime: {{ $now }}
{{- end }}
{{- with .spec.initContainers }}
initContainerStatuses:
{{- range . }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now }}
      finishedAt: {{ $now }}
{{- end }}
{{- end }}
containerStatuses:
{{- range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now }}
{{- end }}
"""

_READY_STATUS = '.status.conditions[] | select(.type == "Ready") | .status'


def _stage(name: str, kind: str, expressions: list[dict[str, Any]], nxt: dict[str, Any],
           delay: dict[str, int] | None = None) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": expressions},
        "next": nxt,
    }
    if delay:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _status_patch(template: str) -> dict[str, Any]:
    return {
        "patches": [{"subresource": "status", "root": "status", "type": "strategic", "template": template}]
    }


def kwok_stages(heartbeat_s: float = 60.0) -> list[dict[str, Any]]:
    """Node: initialise to Ready, then a heartbeat every ``heartbeat_s`` (to 1.5 times that);
    pod: a bound pod is Running with its containers ready; a deleted pod goes (finalizers dropped)."""
    beat = int(heartbeat_s * 1000)
    return [
        _stage(
            "kalena-node-ready",
            "Node",
            [{"key": _READY_STATUS, "operator": "NotIn", "values": ["True"]}],
            _status_patch(_NODE_READY),
        ),
        _stage(
            "kalena-node-heartbeat",
            "Node",
            [{"key": _READY_STATUS, "operator": "In", "values": ["True"]}],
            _status_patch(_NODE_HEARTBEAT),
            {"durationMilliseconds": beat, "jitterDurationMilliseconds": beat * 3 // 2},
        ),
        _stage(
            "kalena-pod-running",
            "Pod",
            [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
            ],
            _status_patch(_POD_RUNNING),
        ),
        _stage(
            "kalena-pod-delete",
            "Pod",
            [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
            {"finalizers": {"empty": True}, "delete": True},
        ),
    ]


#: what kwok does through the API: nothing more is granted it
KWOK_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch", "patch", "update"]},
    {"apiGroups": [""], "resources": ["nodes/status", "pods/status"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
]


# --- processes


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now (all held open together, so none repeats)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGKILL when its parent dies (Linux), so a killed test
    run leaves no control plane behind. (The parent is the starting *thread*: start from one
    that outlives the control plane.)"""

    def set_pdeathsig() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return set_pdeathsig


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    logfile: IO[bytes]

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float) -> None:
        """SIGTERM to its process group, SIGKILL after ``grace`` seconds."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            if self.popen.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(wait)
        # anything it left in its group goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.logfile.close()


def open_url(url: str, context: ssl.SSLContext, timeout: float = 10.0) -> Any:
    """``urlopen`` with ``context`` and no proxy: a proxy from the environment never sees loopback."""
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    return opener.open(url, timeout=timeout)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


# --- nodes


@dataclass(frozen=True)
class NodeSpec:
    """A kwok node: its allocatable (and capacity) cpu, memory and pods, labels and taints
    (``{"key", "value", "effect"}`` mappings)."""

    name: str
    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    extra_resources: Mapping[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, **self.extra_resources}
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64", "type": "kwok", **self.labels}  # fmt: skip
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
            "spec": {"taints": [dict(t) for t in self.taints]},
            # the apiserver keeps a new node's status: this is what the scheduler sees
            "status": {"allocatable": resources, "capacity": dict(resources)},
        }


def node_ready(node: Any) -> bool:
    """Ready True and without the not-ready taint (a V1Node)."""
    ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    return ready and not any(t.key == NOT_READY_TAINT for t in (node.spec.taints or []))


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.25) -> T:
    """``probe()``'s first value that is not None (or False), polling; TimeoutError naming ``what``."""
    end = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= end:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(every)


# --- the control plane


class ControlPlane:
    """etcd, kube-apiserver, kube-scheduler and kwok on ``host``, in ``work_dir`` (a new temporary
    folder by default, removed by :meth:`stop`). Use as a context manager, or call :meth:`start`
    and :meth:`stop`.

    Once started: ``api_url`` (``https://127.0.0.1:PORT``), ``ca`` (the CA's PEM), ``kubeconfig``
    (the admin's, group ``system:masters``), ``client`` and ``core`` (the admin's Kubernetes
    clients), :meth:`kubeconfig_for` any user and groups, :meth:`add_nodes`, :meth:`wait_for_pods`,
    ``log_path(name)`` and ``timings`` (seconds from etcd's start: ``apiserver_ready``,
    ``scheduler_ready``).

    ``scheduler_config``: top-level keys merged into kube-scheduler's KubeSchedulerConfiguration
    (``profiles``, ``extenders``, ...); :meth:`restart_scheduler` starts kube-scheduler again with
    other keys (or these), :meth:`restart_apiserver` kube-apiserver with the same flags.
    ``apiserver_args``: more kube-apiserver flags (a later one overrides an earlier).
    ``node_heartbeat_s``: how often kwok renews each Ready node's heartbeat (nothing here reads it
    without a controller-manager; raise it for thousands of nodes)."""

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        work_dir: Path | None = None,
        host: str = "127.0.0.1",
        scheduler_config: Mapping[str, Any] | None = None,
        apiserver_args: Sequence[str] = (),
        node_heartbeat_s: float = 60.0,
        start_timeout: float = 180.0,
        stop_grace: float = 10.0,
    ) -> None:
        self.bin_dir = find_binaries(bin_dir)
        self.host = host
        self.scheduler_config = dict(scheduler_config or {})
        self.apiserver_args = list(apiserver_args)
        self.node_heartbeat_s = node_heartbeat_s
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self._own_dir = work_dir is None
        self.work_dir = work_dir if work_dir is not None else Path(tempfile.mkdtemp(prefix="kalena-k8s-"))
        self.processes: dict[str, Process] = {}
        self.spawned: dict[str, int] = {}  # every process started, by name: its pid (kept after a stop)
        self.timings: dict[str, float] = {}
        self.started_at = 0.0  # time.monotonic() when etcd was started: the timings count from it
        self.api_url = ""
        self.scheduler_url = ""
        self.kubeconfig = self.work_dir / "admin.kubeconfig"  # the admin's (written at start)
        self.ca = self.work_dir / "pki" / "ca.pem"
        self.pki: Pki | None = None
        self._clients: list[kclient.ApiClient] = []
        self._client: kclient.ApiClient | None = None
        self._minted = 0
        self._node_count = 0
        self._scheduler_files: tuple[Path, tuple[Path, Path], int] = (Path(), (Path(), Path()), 0)
        self._apiserver_argv: list[str] = []  # kube-apiserver's flags, for restart_apiserver

    # -- life cycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start everything and wait for the apiserver and the scheduler to be ready; on failure
        everything started is stopped and :class:`ControlPlaneError` has the logs' last lines."""
        for attempt in range(3):
            try:
                self._start()
                return self
            except ControlPlaneError as e:
                in_use = any("address already in use" in tail(p.log, 200) for p in self.processes.values())
                self._stop_processes()
                self._close_clients()
                if not (in_use and attempt < 2):  # another run took a port between choosing and binding
                    shutil.rmtree(
                        self.work_dir / "etcd", ignore_errors=True
                    )  # the logs are kept, not the data
                    raise ControlPlaneError(f"{e}\n(logs in {self.work_dir / 'logs'})") from None
            except BaseException:
                self._stop_processes()
                self._close_clients()
                raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """End every process (SIGTERM, then SIGKILL) and remove the work folder if it made it."""
        self._close_clients()
        self._stop_processes()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _close_clients(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()
        self._client = None

    def _stop_processes(self) -> None:
        # the clients of the apiserver first, etcd last: each stops while what it talks to is up
        for group in (("kwok", "kube-scheduler"), ("kube-apiserver",), ("etcd",)):
            for name in group:
                p = self.processes.pop(name, None)
                if p is not None:
                    p.stop(self.stop_grace)

    def pids(self) -> dict[str, int]:
        return {name: p.popen.pid for name, p in self.processes.items()}

    def log_path(self, name: str) -> Path:
        return self.work_dir / "logs" / f"{name}.log"

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str] | None = None) -> Process:
        self.log_path(name).parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path(name)
        logfile = open(log, "ab")  # noqa: SIM115 - closed by Process.stop
        popen = subprocess.Popen(
            [str(self.bin_dir / name), *args],
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            cwd=self.work_dir,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # its own process group, so stop() ends all of it
            preexec_fn=_die_with_parent(os.getpid()),  # runs in the child, before exec
        )
        proc = Process(name, popen, log, logfile)
        self.processes[name] = proc
        self.spawned[name] = popen.pid
        return proc

    def _https_ready(self, url: str, context: ssl.SSLContext, who: Sequence[str]) -> bool:
        """Whether ``url`` answers 200; a process of ``who`` that has exited is a failure at once."""
        for name in who:
            p = self.processes[name]
            if not p.alive():
                raise ControlPlaneError(
                    f"{name} exited ({p.popen.returncode}) before the control plane was ready; "
                    f"its log ends:\n{tail(p.log)}"
                )
        try:
            with open_url(url, context, timeout=5) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _wait_ready(
        self, name: str, url: str, context: ssl.SSLContext, who: Sequence[str], t0: float
    ) -> None:
        end = t0 + self.start_timeout
        while not self._https_ready(url, context, who):
            if time.monotonic() > end:
                logs = "\n".join(f"--- {n}:\n{tail(self.processes[n].log)}" for n in who)
                raise ControlPlaneError(f"{name} not ready at {url} within {self.start_timeout:g} s\n{logs}")
            time.sleep(0.1)
        self.timings[f"{name}_ready"] = time.monotonic() - t0

    def _start(self) -> None:
        if self.processes:
            raise ControlPlaneError("already started")
        for d in ("etcd", "pki", "users", "logs"):
            shutil.rmtree(self.work_dir / d, ignore_errors=True)
        pki = self.pki = Pki(self.ca.parent)
        serving = pki.issue("serving", "kalena-harness-apiserver", server_ips=[self.host])
        admin = pki.issue("admin", ADMIN_USER, ["system:masters"])
        scheduler = pki.issue("kube-scheduler", SCHEDULER_USER)
        kwok = pki.issue("kwok", KWOK_USER)
        sa_key, sa_pub = pki.signing_key("service-account")
        # the front proxy (aggregated APIs) has a CA of its own, as the client CA must not vouch for it
        front = Pki(self.ca.parent, "front-proxy-ca")
        proxy_client = front.issue("front-proxy-client", "front-proxy-client")
        etcd_client, etcd_peer, api_port, sched_port = free_ports(4, self.host)
        self.api_url = f"https://{self.host}:{api_port}"
        write_kubeconfig(self.kubeconfig, self.api_url, pki.ca, *admin, ADMIN_USER)
        sched_kubeconfig = write_kubeconfig(self.work_dir / "kube-scheduler.kubeconfig", self.api_url, pki.ca,
                                            *scheduler, SCHEDULER_USER)  # fmt: skip
        kwok_kubeconfig = write_kubeconfig(self.work_dir / "kwok.kubeconfig", self.api_url, pki.ca, *kwok,
                                           KWOK_USER)  # fmt: skip
        self._admin_ssl = ssl.create_default_context(cafile=str(pki.ca))
        self._admin_ssl.load_cert_chain(*admin)

        t0 = self.started_at = time.monotonic()
        etcd_url = f"http://{self.host}:{etcd_client}"
        peer_url = f"http://{self.host}:{etcd_peer}"
        # plain HTTP on loopback between the apiserver and etcd; fsync off: test data, and the
        # loaded CI machine would otherwise make etcd the slowest part
        self._spawn("etcd", [
            "--name", "harness", "--data-dir", str(self.work_dir / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"harness={peer_url}", "--unsafe-no-fsync", "--log-level", "warn",
        ])  # fmt: skip
        self._apiserver_argv = [
            "--etcd-servers", etcd_url,
            "--bind-address", self.host, "--advertise-address", self.host, "--secure-port", str(api_port),
            "--tls-cert-file", str(serving[0]), "--tls-private-key-file", str(serving[1]),
            "--client-ca-file", str(pki.ca),
            "--authorization-mode", "Node,RBAC",
            "--requestheader-client-ca-file", str(front.ca),
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", str(proxy_client[0]), "--proxy-client-key-file", str(proxy_client[1]),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(sa_pub), "--service-account-signing-key-file", str(sa_key),
            # without kube-controller-manager nothing would lift the not-ready taint this plugin sets
            "--disable-admission-plugins", "TaintNodesByCondition",
            "--allow-privileged=true",
            "--service-cluster-ip-range", "10.96.0.0/16",  # addresses in Service objects only: no proxy here
            "--endpoint-reconciler-type", "none",  # the kubernetes Service's endpoints: nothing reaches it
            "--cert-dir", str(self.work_dir / "pki"),
            "--profiling=false",
            *self.apiserver_args,
        ]  # fmt: skip
        self._spawn("kube-apiserver", self._apiserver_argv)
        self._wait_ready(
            "apiserver", f"{self.api_url}/readyz", self._admin_ssl, ("etcd", "kube-apiserver"), t0
        )

        rbac = kclient.RbacAuthorizationV1Api(self.client)
        rbac.create_cluster_role({"metadata": {"name": "kalena-harness:kwok"}, "rules": KWOK_RULES})
        rbac.create_cluster_role_binding({
            "metadata": {"name": "kalena-harness:kwok"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "kalena-harness:kwok"},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": KWOK_USER}],
        })  # fmt: skip
        self.ensure_namespace("default")

        self._scheduler_files = (sched_kubeconfig, serving, sched_port)
        self._spawn_scheduler(self.scheduler_config)
        stages = self.work_dir / "kwok-stages.yaml"
        stages.write_text(yaml.safe_dump_all(kwok_stages(self.node_heartbeat_s), sort_keys=False))
        # HOME: kwok would also read ~/.kwok/kwok.yaml, which is no business of a test
        self._spawn("kwok", [
            "--kubeconfig", str(kwok_kubeconfig), "--config", str(stages),
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        ], env={"HOME": str(self.work_dir)})  # fmt: skip
        self.scheduler_url = f"https://{self.host}:{sched_port}"
        sched_ssl = ssl.create_default_context(cafile=str(pki.ca))
        self._wait_ready("scheduler", f"{self.scheduler_url}/readyz", sched_ssl,
                         ("etcd", "kube-apiserver", "kube-scheduler", "kwok"), t0)  # fmt: skip

    def _spawn_scheduler(self, extra: Mapping[str, Any]) -> None:
        """kube-scheduler with ``extra`` merged into its KubeSchedulerConfiguration."""
        sched_kubeconfig, serving, sched_port = self._scheduler_files
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(sched_kubeconfig)},
            "leaderElection": {"leaderElect": False},
            **extra,
        }
        sched_config = self.work_dir / "kube-scheduler.yaml"
        sched_config.write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn("kube-scheduler", [
            "--config", str(sched_config),
            "--bind-address", self.host, "--secure-port", str(sched_port),
            "--tls-cert-file", str(serving[0]), "--tls-private-key-file", str(serving[1]),
            "--authentication-kubeconfig", str(sched_kubeconfig),
            "--authorization-kubeconfig", str(sched_kubeconfig),
        ])  # fmt: skip

    def restart_scheduler(self, scheduler_config: Mapping[str, Any] | None = None) -> float:
        """Stop kube-scheduler and start it again with ``scheduler_config`` (top-level keys merged
        into its KubeSchedulerConfiguration, as the constructor's; ``None``: the constructor's),
        on the same port; returns the seconds until it was ready again. The rest of the control
        plane keeps running (a test reconfigures the shared one and puts it back)."""
        if "kube-scheduler" not in self.processes or self.pki is None:
            raise ControlPlaneError("the control plane is not started")
        self.processes.pop("kube-scheduler").stop(self.stop_grace)
        t0 = time.monotonic()
        self._spawn_scheduler(self.scheduler_config if scheduler_config is None else scheduler_config)
        sched_ssl = ssl.create_default_context(cafile=str(self.ca))
        self._wait_ready("scheduler_restart", f"{self.scheduler_url}/readyz", sched_ssl,
                         ("kube-apiserver", "kube-scheduler"), t0)  # fmt: skip
        return self.timings["scheduler_restart_ready"]

    def restart_apiserver(self) -> float:
        """Stop kube-apiserver and start it again with the same flags on the same port (etcd keeps
        the cluster's state); returns the seconds until it was ready again. The other processes
        keep running and reconnect to it, as to a restarted apiserver in a cluster: a test of a
        client's recovery (its open watches break, its next calls find the port closed a while)."""
        if "kube-apiserver" not in self.processes or not self._apiserver_argv:
            raise ControlPlaneError("the control plane is not started")
        self.processes.pop("kube-apiserver").stop(self.stop_grace)
        t0 = time.monotonic()
        self._spawn("kube-apiserver", self._apiserver_argv)
        self._wait_ready("apiserver_restart", f"{self.api_url}/readyz", self._admin_ssl,
                         ("etcd", "kube-apiserver"), t0)  # fmt: skip
        return self.timings["apiserver_restart_ready"]

    # -- clients and users

    @property
    def client(self) -> kclient.ApiClient:
        """The admin's client (``system:masters``)."""
        if self._client is None:
            self._client = self.api_client_from(self.kubeconfig)
        return self._client

    @property
    def core(self) -> kclient.CoreV1Api:
        return kclient.CoreV1Api(self.client)

    def api_client_from(self, kubeconfig: Path) -> kclient.ApiClient:
        """A client of ``kubeconfig``'s user, closed by :meth:`stop`."""
        c = kconfig.new_client_from_config(config_file=str(kubeconfig))
        self._clients.append(c)
        return c

    def kubeconfig_for(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig whose client certificate says ``user`` in ``groups`` (RBAC subjects)."""
        if self.pki is None:
            raise ControlPlaneError("the control plane is not started")
        self._minted += 1
        name = f"user-{self._minted}"
        users = self.work_dir / "users"
        users.mkdir(exist_ok=True)
        cert, key = self.pki.issue(f"../users/{name}", user, groups)
        return write_kubeconfig(users / f"{name}.kubeconfig", self.api_url, self.ca, cert, key,
                                user)  # fmt: skip

    def api_client_for(self, user: str, groups: Sequence[str] = ()) -> kclient.ApiClient:
        return self.api_client_from(self.kubeconfig_for(user, groups))

    def ensure_namespace(self, name: str) -> None:
        """The namespace and its ``default`` ServiceAccount (the ServiceAccount admission plugin
        refuses pods without it, and no controller-manager makes it)."""
        core = self.core
        for create, body in (
            (lambda b: core.create_namespace(b), {"metadata": {"name": name}}),
            (lambda b: core.create_namespaced_service_account(name, b), {"metadata": {"name": "default"}}),
        ):
            try:
                create(body)
            except ApiException as e:
                if e.status != 409:  # already there
                    raise

    # -- nodes and pods

    def add_nodes(
        self,
        nodes: int | Sequence[NodeSpec],
        *,
        cpu: str = "32",
        memory: str = "256Gi",
        pods: str = "110",
        labels: Mapping[str, str] | None = None,
        wait: bool = True,
        timeout: float = 120.0,
    ) -> list[str]:
        """Create kwok nodes (``nodes`` of the given size, named ``kwok-node-N``, or these specs) and,
        with ``wait``, wait until each is Ready without the not-ready taint. Returns their names."""
        if isinstance(nodes, int):
            specs = []
            for _ in range(nodes):
                specs.append(NodeSpec(f"kwok-node-{self._node_count}", cpu, memory, pods, dict(labels or {})))
                self._node_count += 1
        else:
            specs = list(nodes)
        core = self.core
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda s: core.create_node(s.manifest()), specs))
        names = [s.name for s in specs]
        if wait:
            self.wait_nodes_ready(names, timeout)
        return names

    def wait_nodes_ready(self, names: Sequence[str], timeout: float = 120.0) -> None:
        want = set(names)

        def all_ready() -> bool:
            ready = {n.metadata.name for n in self.core.list_node().items if node_ready(n)}
            return want <= ready

        try:
            wait_for(f"{len(want)} kwok nodes Ready", all_ready, timeout)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; kwok's log ends:\n{tail(self.log_path('kwok'))}") from None

    def wait_for_pods(
        self, namespace: str, names: Sequence[str], *, running: bool = True, timeout: float = 120.0
    ) -> list[Any]:
        """The pods (V1Pod) once each is bound to a node and, with ``running``, in phase Running."""
        want = list(names)
        last: dict[str, Any] = {}

        def done() -> list[Any] | None:
            pods = {p.metadata.name: p for p in self.core.list_namespaced_pod(namespace).items}
            last.clear()
            last.update(pods)
            if all(
                n in pods and pods[n].spec.node_name and (not running or pods[n].status.phase == "Running")
                for n in want
            ):
                return [pods[n] for n in want]
            return None

        try:
            return wait_for(f"pods {want} {'running' if running else 'bound'}", done, timeout)
        except TimeoutError as e:
            states = [f"{n}: " + (_pod_state(last[n]) if n in last else "absent") for n in want]
            raise TimeoutError(f"{e}; " + "; ".join(states)) from None


def _pod_state(pod: Any) -> str:
    why = [
        f"{c.type}={c.status} {c.reason or ''} {c.message or ''}".strip() for c in pod.status.conditions or []
    ]
    return f"phase {pod.status.phase}, node {pod.spec.node_name}, " + ", ".join(why)
