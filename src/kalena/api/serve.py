"""Serving the HTTP API with uvicorn: loopback or a Unix socket by default, a wider bind only with a
token (or a CA whose client certificates it requires), TLS when given a certificate."""

from __future__ import annotations

import hmac
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Header, HTTPException

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


def check_bind(
    listen: Listen, token: str | None, *, client_ca: bool = False, tls: str = "--api-tls-cert/--api-tls-key"
) -> None:
    """A non-loopback TCP address needs a token: whoever reaches the API reaches the Docker socket.
    A server that requires client certificates (``client_ca``) authenticates its callers itself.
    ``tls`` names the command's TLS options in the refusal."""
    if listen.socket is None and not is_loopback(listen.host or "") and not token and not client_ca:
        raise BindRefused(f"--listen: {listen.describe()} is not loopback; give --token-file (and {tls})")


def bearer_check(token: str | None) -> Callable[..., None]:
    """A FastAPI dependency: with a token, a request needs ``Authorization: Bearer TOKEN``
    (compared in constant time), else 401; without one, every request passes."""

    def authorised(authorization: Annotated[str | None, Header()] = None) -> None:
        if token is None:
            return
        given = (authorization or "").removeprefix("Bearer ").strip()
        if (
            not authorization
            or not authorization.startswith("Bearer ")
            or not hmac.compare_digest(given, token)
        ):
            raise HTTPException(401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})

    return authorised


class ApiServer:
    """uvicorn in a thread (the agent's loop keeps the main thread). With ``client_ca`` (and TLS),
    every connection must present a client certificate that CA signed."""

    def __init__(
        self,
        app: FastAPI,
        listen: Listen,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        client_ca: Path | None = None,
    ) -> None:
        kw: dict[str, object] = {"log_level": "warning", "access_log": False, "lifespan": "off"}
        self.socket = listen.socket
        if listen.socket is not None:
            kw["uds"] = str(listen.socket)
        else:
            kw["host"], kw["port"] = listen.host, listen.port
        if tls_cert is not None:
            kw["ssl_certfile"], kw["ssl_keyfile"] = str(tls_cert), str(tls_key) if tls_key else None
            if client_ca is not None:
                kw["ssl_ca_certs"], kw["ssl_cert_reqs"] = str(client_ca), ssl.CERT_REQUIRED
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
