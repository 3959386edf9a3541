"""One Docker Engine, through the Docker SDK: connect, list and inspect containers, follow events.

An endpoint is what ``docker -H`` takes: ``unix:///var/run/docker.sock`` (the default),
``tcp://HOST:2376`` (with TLS: a CA and a client certificate, as ``docker --tlsverify``) or
``ssh://USER@HOST`` (the ``ssh`` client on this machine). Every failure to reach an engine is an
:class:`EngineError` naming the endpoint and what went wrong, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import docker.tls
import requests

import docker
from kalena.docker import DEFAULT_ENDPOINT
from kalena.docker.labels import ContainerFacts

_log = logging.getLogger(__name__)

#: Engine API calls are local and small; a slow engine is reported, not waited on forever.
DEFAULT_TIMEOUT_S = 30.0
#: How long a listing waits for the inspect of a container not started yet: it answers in
#: milliseconds, unless a start of it is under way (the engine holds the container through its
#: start, which can take many seconds for batch on a busy machine); then it is left out.
CREATED_INSPECT_S = 1.0


class EngineError(RuntimeError):
    """An engine could not be reached or refused a request (the message names the endpoint)."""

    def __init__(self, endpoint: str, message: str) -> None:
        self.endpoint = endpoint
        super().__init__(f"docker engine {endpoint}: {message}")


class EngineTimeout(EngineError):
    """The engine did not answer in time."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """``docker --tlsverify --tlscacert CA --tlscert CERT --tlskey KEY`` as files."""

    ca: Path
    cert: Path
    key: Path


def _reason(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


_CA_BUNDLE_VARS = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


@contextlib.contextmanager
def _without_env(*names: str) -> Iterator[None]:
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def connect(
    endpoint: str = DEFAULT_ENDPOINT, tls: TlsFiles | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> docker.DockerClient:
    """A client for ``endpoint`` whose engine answered a ping (``EngineError`` otherwise)."""
    if not endpoint.startswith(("unix://", "tcp://", "ssh://", "npipe://")):
        raise EngineError(endpoint, "an endpoint is unix://PATH, tcp://HOST:PORT or ssh://USER@HOST")
    if (
        endpoint.startswith("tcp://")
        and tls is None
        and not endpoint.startswith(("tcp://127.", "tcp://[::1]"))
    ):
        raise EngineError(
            endpoint, "a tcp:// endpoint off this machine needs TLS (--tls-ca, --tls-cert, --tls-key)"
        )
    tls_config: Any = False
    if tls is not None:
        for what, path in (("CA", tls.ca), ("certificate", tls.cert), ("key", tls.key)):
            if not path.is_file():
                raise EngineError(endpoint, f"TLS {what} file {path} does not exist")
        # verify=True makes the SDK check the engine against this CA (without it, the system's CAs)
        tls_config = docker.tls.TLSConfig(
            client_cert=(str(tls.cert), str(tls.key)), ca_cert=str(tls.ca), verify=True
        )
    try:
        # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE override the CA a client was given: with
        # TLS files the engine is checked against their CA, the environment's bundle left out
        with _without_env(*(_CA_BUNDLE_VARS if tls is not None else ())):
            client = docker.DockerClient(
                base_url=endpoint,
                tls=tls_config,
                timeout=int(timeout_s),
                use_ssh_client=endpoint.startswith("ssh://"),
            )
        if tls is not None:
            client.api.trust_env = False
        client.ping()
    except (docker.errors.DockerException, OSError) as e:
        raise EngineError(endpoint, f"not reachable: {_reason(e)}") from None
    return client


class Engine:
    """The calls Kalena makes on one engine (the low-level API: one request each)."""

    def __init__(self, client: docker.DockerClient, endpoint: str = DEFAULT_ENDPOINT) -> None:
        self.client = client
        self.api = client.api
        self.endpoint = endpoint
        # containers whose start is under way through this engine (from any thread): the engine
        # holds a container's lock through its start, so an inspect of one waits for it to end
        self._starting: Counter[str] = Counter()
        self._starting_lock = threading.Lock()

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except docker.errors.NotFound:
            raise
        except requests.exceptions.Timeout as e:
            raise EngineTimeout(self.endpoint, f"{what}: {_reason(e)}") from None
        except (docker.errors.DockerException, OSError) as e:
            raise EngineError(self.endpoint, f"{what}: {_reason(e)}") from None

    def info(self) -> dict[str, Any]:
        return self._call("info", self.api.info)

    def services(self) -> dict[str, dict[str, Any]]:
        """Swarm services by id (``inspect``), on a manager; ``{}`` outside a swarm or on a worker,
        whose engine cannot answer for the swarm's services."""
        swarm = self.info().get("Swarm") or {}
        if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
            return {}
        listed = self._call("list services", self.api.services)
        return {str(svc["ID"]): svc for svc in listed}

    def containers(self, all: bool = False, label: str | None = None) -> list[ContainerFacts]:
        """Every (running, unless ``all``) container (with ``label``: ``KEY=VALUE`` only those),
        inspected; left out: one gone meanwhile, one this engine is starting, and one not started
        yet whose inspect does not answer within :data:`CREATED_INSPECT_S` (being started by
        another client): their inspect would wait for the start, and the next listing has them."""
        filters = {"label": label} if label else None
        listed = self._call("list containers", lambda: self.api.containers(all=all, filters=filters))
        with self._starting_lock:
            starting = set(self._starting)
        out = []
        for c in listed:
            names = {n.lstrip("/") for n in c.get("Names") or []}
            if starting and (names & starting or c["Id"] in starting):
                continue
            bound = CREATED_INSPECT_S if c.get("State") == "created" else None
            try:
                facts = self.inspect(c["Id"], timeout_s=bound)
            except EngineTimeout:
                continue
            if facts is not None:
                out.append(facts)
        return out

    def inspect(self, ref: str, timeout_s: float | None = None) -> ContainerFacts | None:
        """The container ``ref`` (id or name), ``None`` if there is none. ``timeout_s``: how long to
        wait (``None``: the client's timeout; past it, :class:`EngineTimeout`)."""

        def go() -> Any:
            extra = {} if timeout_s is None else {"timeout": timeout_s}
            res = self.api._get(self.api._url("/containers/{0}/json", ref), **extra)
            return self.api._result(res, True)

        try:
            data = self._call(f"inspect {ref}", go)
        except docker.errors.NotFound:
            return None
        return ContainerFacts.from_inspect(data)

    def status(self, name: str) -> str | None:
        """The container ``name``'s state as the engine lists it (``created``, ``running``,
        ``exited``, ...), ``None`` if there is none. The listing answers at once where an inspect
        waits for a start under way (``created`` until it has ended)."""
        wanted = "/" + name
        filters = {"name": f"^{wanted}$"}
        listed = self._call(f"list {name}", lambda: self.api.containers(all=True, filters=filters))
        for c in listed:
            if wanted in (c.get("Names") or []):
                return str(c.get("State") or "")
        return None

    def has_image(self, image: str) -> bool:
        try:
            self._call(f"inspect image {image}", lambda: self.api.inspect_image(image))
        except docker.errors.NotFound:
            return False
        return True

    def create(self, name: str, image: str, command: list[str], labels: dict[str, str], **host: Any) -> str:
        """Create (not start) a container; returns its id. ``host``: HostConfig keywords."""

        def go() -> str:
            hc = self.api.create_host_config(**host)
            made = self.api.create_container(
                image, command=command or None, name=name, labels=labels, host_config=hc
            )
            return str(made["Id"])

        return self._call(f"create {name}", go)

    def start(self, ref: str, timeout_s: float | None = None) -> None:
        """``docker start``, waiting up to ``timeout_s`` for the engine's answer (``None``: the
        client's timeout). The engine runs one start of a container at a time: a second request
        waits for the first and succeeds without starting it again once it runs."""

        def go() -> None:
            extra = {} if timeout_s is None else {"timeout": timeout_s}
            res = self.api._post(self.api._url("/containers/{0}/start", ref), **extra)
            self.api._raise_for_status(res)

        with self._starting_lock:
            self._starting[ref] += 1
        try:
            self._call(f"start {ref}", go)
        except docker.errors.NotFound as e:  # removed meanwhile: a failed start like any other
            raise EngineError(self.endpoint, f"start {ref}: {_reason(e)}") from None
        finally:
            with self._starting_lock:
                self._starting[ref] -= 1
                if self._starting[ref] <= 0:
                    del self._starting[ref]

    def kill(self, ref: str, sig: str) -> bool:
        """Send ``sig``; ``False`` if the container is gone or not running (nothing to signal)."""
        try:
            self._call(f"kill {ref}", lambda: self.api.kill(ref, signal=sig))
        except docker.errors.NotFound:
            return False
        except EngineError as e:
            if "is not running" in str(e):
                return False
            raise
        return True

    def remove(self, ref: str) -> bool:
        """Remove a container (forced); ``False`` if there was none."""
        try:
            self._call(f"remove {ref}", lambda: self.api.remove_container(ref, force=True))
        except docker.errors.NotFound:
            return False
        return True

    def update(self, ref: str, **resources: Any) -> None:
        """``docker update``: ``cpu_quota``, ``cpu_period``, ``nano_cpus``, ``cpu_shares``,
        ``memory_reservation`` (as the API names them), in one request."""
        body: dict[str, Any] = {}
        names = {"cpu_quota": "CpuQuota", "cpu_period": "CpuPeriod", "nano_cpus": "NanoCpus",
                 "cpu_shares": "CpuShares", "memory_reservation": "MemoryReservation"}  # fmt: skip
        for k, v in resources.items():
            body[names[k]] = v

        def go() -> None:
            url = self.api._url("/containers/{0}/update", ref)
            res = self.api._post_json(url, data=body)
            self.api._raise_for_status(res)

        self._call(f"update {ref}", go)

    def update_service(self, ref: str, version: int, spec: dict[str, Any]) -> None:
        """``docker service update``: replace service ``ref``'s spec, if it is still at ``version``
        (Swarm refuses an update against an older version: a racing writer loses, not both)."""

        def go() -> None:
            url = self.api._url("/services/{0}/update", ref)
            res = self.api._post_json(url, data=spec, params={"version": version})
            self.api._raise_for_status(res)

        self._call(f"update service {ref}", go)

    def events(
        self, stop: threading.Event, on_open: Callable[[], None] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Container events until ``stop`` is set (the stream is closed then); ``on_open`` is called
        once the engine has answered (events from then on are in the stream)."""
        stream = self._call("events", lambda: self.api.events(decode=True, filters={"type": "container"}))
        if on_open is not None:
            on_open()
        try:
            for ev in stream:
                if stop.is_set():
                    return
                yield ev
        finally:
            with contextlib.suppress(Exception):
                stream.close()


class EventWatch:
    """A daemon thread following an engine's container events: :meth:`take` says whether any
    arrived since the last call. A broken stream is reopened; until then every call says yes,
    so the caller re-lists instead of trusting a stale view."""

    def __init__(self, engine: Engine, reconnect_s: float = 1.0) -> None:
        self.engine = engine
        self.reconnect_s = reconnect_s
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self._dirty.set()  # nothing seen yet: list once
        self._healthy = False
        self._thread = threading.Thread(target=self._run, name="kalena-docker-events", daemon=True)
        self._thread.start()

    def _opened(self) -> None:
        # healthy only once the stream is open (over ssh that takes a while): what happened while
        # it was opening is in no stream, so the caller lists once more
        self._healthy = True
        self._dirty.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for _ in self.engine.events(self._stop, self._opened):
                    self._dirty.set()
            except (EngineError, docker.errors.DockerException, OSError, ValueError):
                pass
            except Exception:  # anything else (a library's own bug): the watch must not die
                # healthy, or the caller would trust a view no event refreshes again
                _log.exception("the engine's event stream broke; reopening it")
            self._healthy = False
            self._dirty.set()
            self._stop.wait(self.reconnect_s)

    @property
    def streaming(self) -> bool:
        """The event stream is open (until it is, :meth:`take` always says yes)."""
        return self._healthy

    def take(self) -> bool:
        if not self._healthy:
            return True
        was = self._dirty.is_set()
        self._dirty.clear()
        return was

    def close(self) -> None:
        self._stop.set()
