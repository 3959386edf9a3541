"""Serving the HTTP API with uvicorn: loopback or a Unix socket by default, a wider bind only with a
token, TLS when given a certificate."""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI

DEFAULT_LISTEN = "127.0.0.1:8470"


class BindRefused(ValueError):
    """A listen address the API may not use as asked (the message says why)."""


@dataclass(frozen=True, slots=True)
class Listen:
    host: str | None = None
    port: int | None = None
    socket: Path | None = None

    def describe(self) -> str:
        return f"unix:{self.socket}" if self.socket is not None else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """``HOST:PORT``, ``[V6]:PORT`` or ``unix:/path/to.sock``."""
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path:
            raise BindRefused(f"--listen: a Unix socket needs a path (value: {text!r})")
        return Listen(socket=Path(path))
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BindRefused(f"--listen: expected HOST:PORT or unix:PATH (value: {text!r})")
    return Listen(host=host, port=int(port))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
        except OSError:
            return False


def check_bind(listen: Listen, token: str | None) -> None:
    """A non-loopback TCP address needs a token: whoever reaches the API reaches the Docker socket."""
    if listen.socket is None and not is_loopback(listen.host or "") and not token:
        raise BindRefused(
            f"--listen: {listen.describe()} is not loopback; give --token-file"
            " (and --api-tls-cert/--api-tls-key)"
        )


class ApiServer:
    """uvicorn in a thread (the agent's loop keeps the main thread)."""

    def __init__(
        self, app: FastAPI, listen: Listen, tls_cert: Path | None = None, tls_key: Path | None = None
    ) -> None:
        kw: dict[str, object] = {"log_level": "warning", "access_log": False, "lifespan": "off"}
        self.socket = listen.socket
        if listen.socket is not None:
            kw["uds"] = str(listen.socket)
        else:
            kw["host"], kw["port"] = listen.host, listen.port
        if tls_cert is not None:
            kw["ssl_certfile"], kw["ssl_keyfile"] = str(tls_cert), str(tls_key) if tls_key else None
        self.server = uvicorn.Server(uvicorn.Config(app, **kw))  # type: ignore[arg-type]
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # the agent's
        self.thread = threading.Thread(target=self.server.run, name="kalena-api", daemon=True)

    def start(self, wait_s: float = 30.0) -> None:
        self.thread.start()
        for _ in range(int(wait_s * 20)):
            if self.server.started or not self.thread.is_alive():
                break
            threading.Event().wait(0.05)
        if not self.server.started:
            raise OSError("the HTTP API did not start (is the address in use?)")
        if self.socket is not None:
            self.socket.chmod(0o600)  # uvicorn leaves it writable by all; the API is root's

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
