"""A loopback HTTP endpoint to drive a running cluster from another process (``minibroker ctl``).

Routes (JSON in, JSON out):

* ``GET /describe`` (``?topic=NAME`` for one topic): brokers and partitions.
* ``POST /brokers/<id>/stop|start|isolate|heal``; ``POST /brokers/<id>/slow`` with
  ``{"delay_ms": 500}``.
* ``POST /topics`` with ``{"name", "partitions", "replication_factor", "config"}``;
  ``DELETE /topics/<name>``.

``handle`` is the routing logic and knows nothing about sockets; ``ControlServer`` is the
minimal HTTP/1.1 shell around it (one request per connection), bound to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from minibroker.cluster import AsyncCluster
from minibroker.errors import MinibrokerError, TopicError

__all__ = ["ControlServer", "handle"]

logger = logging.getLogger(__name__)

_MAX_BODY_BYTES = 1_000_000
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def describe(cluster: AsyncCluster, topic: str | None) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.bootstrap_servers,
        "controller": cluster.controller_id,
        "brokers": [dataclasses.asdict(b) for b in cluster.brokers()],
        "partitions": [dataclasses.asdict(p) for p in cluster.describe(topic)],
    }


async def handle(
    cluster: AsyncCluster, method: str, target: str, body: bytes
) -> tuple[int, dict[str, Any]]:
    """Route one request; returns (HTTP status, JSON payload)."""
    url = urlsplit(target)
    parts = [unquote(p) for p in url.path.split("/") if p]  # a topic name is quoted
    try:
        payload = json.loads(body) if body else {}
        if not isinstance(payload, dict):
            return 400, {"error": "the request body must be a JSON object"}
        if parts == ["describe"] and method == "GET":
            topic = parse_qs(url.query).get("topic", [None])[0]
            return 200, describe(cluster, topic)
        if len(parts) == 3 and parts[0] == "brokers" and method == "POST":
            broker_id = int(parts[1])
            action = parts[2]
            if action == "stop":
                cluster.stop_broker(broker_id)
            elif action == "start":
                await cluster.start_broker(broker_id)
            elif action == "isolate":
                cluster.isolate_broker(broker_id)
            elif action == "heal":
                cluster.heal_broker(broker_id)
            elif action == "slow":
                cluster.slow_broker(broker_id, float(payload.get("delay_ms", 0)))
            else:
                return 404, {"error": f"unknown broker action {action!r}"}
            return 200, {"ok": True, "broker": broker_id, "action": action}
        if parts == ["topics"] and method == "POST":
            cluster.create_topic(
                str(payload["name"]),
                int(payload.get("partitions", -1)),
                int(payload.get("replication_factor", -1)),
                payload.get("config") or {},
            )
            return 200, {"ok": True, "topic": payload["name"]}
        if len(parts) == 2 and parts[0] == "topics" and method == "DELETE":
            cluster.delete_topic(parts[1])
            return 200, {"ok": True, "deleted": parts[1]}
        return 404, {"error": f"no route for {method} {url.path}"}
    except TopicError as exc:
        return 400, {"error": str(exc), "error_code": exc.error_code}
    except (MinibrokerError, KeyError, ValueError, TypeError) as exc:
        return 400, {"error": f"{type(exc).__name__}: {exc}"}


class ControlServer:
    """Serves ``handle`` over HTTP on 127.0.0.1."""

    def __init__(self, cluster: AsyncCluster, port: int = 0, host: str = "127.0.0.1") -> None:
        self._cluster = cluster
        self._host = host
        self.port = port
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, payload = await self._one_request(reader)
        except (asyncio.IncompleteReadError, ValueError, UnicodeDecodeError) as exc:
            status, payload = 400, {"error": f"bad HTTP request: {exc}"}
        data = json.dumps(payload, indent=1).encode()
        writer.write(
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + data
        )
        try:
            await writer.drain()
        finally:
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
        request_line = (await reader.readline()).decode("latin-1").strip()
        method, target, _version = request_line.split(" ", 2)
        length = 0
        while True:
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length > _MAX_BODY_BYTES:
            return 400, {"error": f"body of {length} bytes is too large"}
        body = await reader.readexactly(length) if length else b""
        logger.info("control: %s %s", method, target)
        return await handle(self._cluster, method, target, body)
