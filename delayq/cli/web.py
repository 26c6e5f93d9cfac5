"""`delayq web`: serve the operator's page (delayq/web/) with uvicorn, on 127.0.0.1 unless
told otherwise; behind a reverse proxy, `--root-path` is where the proxy mounts it and
`--forwarded-allow-ips` the proxies whose X-Forwarded-* headers count."""

from __future__ import annotations

import ipaddress
import socket
from typing import Annotated

import typer

from ..errors import BadInput, ConfigError, DelayqError
from .app import app, open_queue


@app.command()
def web(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port.")] = 8800,
    root_path: Annotated[
        str, typer.Option("--root-path", help="Path a reverse proxy serves the page under.")
    ] = "",
    forwarded_allow_ips: Annotated[
        str,
        typer.Option(
            "--forwarded-allow-ips", help="Proxies whose X-Forwarded-For/-Proto are trusted."
        ),
    ] = "127.0.0.1",
) -> None:
    """Serve the operator's page: queues, job search and detail; retry, cancel and requeue
    after logging in with DELAYQ_WEB_TOKEN (without it the page is read-only)."""
    _check_host(host)
    if root_path and not (
        root_path.startswith("/") and root_path.isascii() and root_path.isprintable()
    ):
        raise BadInput("--root-path must be a path beginning with /, e.g. /delayq")
    try:
        import uvicorn

        from ..web import create_app
    except ImportError:
        raise ConfigError("delayq web needs the web extra: pip install 'delayq[web]'") from None
    queue = open_queue(create=True)
    page = create_app(queue, token=queue.settings.web_token)
    config = uvicorn.Config(
        page,
        host=host,
        port=port,
        root_path=root_path.rstrip("/"),
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
        log_level="warning",
    )
    # Bound here rather than by uvicorn, so the address is announced only once it listens
    # and a port in use is one line of ours.
    listening = _listen(host, port)
    typer.echo(f"delayq web: listening on {_address(listening)} ({_mode(page.state.token)})")
    uvicorn.Server(config).run(sockets=[listening])


def _listen(host: str, port: int) -> socket.socket:
    listening = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        raise DelayqError(f"cannot listen on {host} port {port}: {exc.strerror}") from None
    listening.set_inheritable(True)
    return listening


def _address(listening: socket.socket) -> str:
    host, port = listening.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _mode(token: str | None) -> str:
    if token is None:
        return "read-only: set DELAYQ_WEB_TOKEN to enable retry, cancel and requeue"
    return "actions enabled: log in with DELAYQ_WEB_TOKEN to retry, cancel and requeue"


def _check_host(host: str) -> None:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not host.replace("-", "").replace(".", "").isalnum() or not host.isascii():
            raise BadInput(f"--host {host!r} is neither an IP address nor a host name") from None
