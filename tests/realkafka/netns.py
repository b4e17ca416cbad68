"""Network namespaces for a real cluster whose brokers can be cut off from each other.

Each node runs in a namespace of its own with one address (10.201.X.(id+1)) on a bridge in the
test's namespace, which holds 10.201.X.254: clients in the test process reach every node through
the bridge. ``isolate`` adds blackhole routes inside one node's namespace to every other node, so
it can neither reach its peers nor answer them, while clients still reach it: minibroker's
``isolate_broker`` on real Kafka. Only ``ip`` (iproute2) is needed, and the right to make
namespaces (root here).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess

from tests.realkafka.jars import Unavailable

_SERIAL = itertools.count()


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Namespaces:
    """One namespace per node id, on a bridge of their own; removed by ``remove``."""

    def __init__(self, node_ids: list[int]) -> None:
        if shutil.which("ip") is None:
            raise Unavailable("network namespaces need `ip` (iproute2), which is not on PATH")
        self.tag = (os.getpid() * 7 + next(_SERIAL)) % 250 + 1
        self._ids = list(node_ids)
        self._bridge = f"rkb{self.tag}"
        self._made: list[str] = []
        self._isolated: set[int] = set()

    def name(self, node_id: int) -> str:
        return f"rk{self.tag}n{node_id}"

    def address(self, node_id: int) -> str:
        return f"10.201.{self.tag}.{node_id + 1}"

    def prefix(self, node_id: int) -> list[str]:
        """What a command is run under to live in ``node_id``'s namespace."""
        return ["ip", "netns", "exec", self.name(node_id)]

    def create(self) -> None:
        try:
            _ip("link", "add", self._bridge, "type", "bridge")
        except RuntimeError as exc:
            raise Unavailable(f"cannot make network namespaces here: {exc}") from exc
        self._made.append("bridge")
        _ip("addr", "add", f"10.201.{self.tag}.254/24", "dev", self._bridge)
        _ip("link", "set", self._bridge, "up")
        for node in self._ids:
            ns, veth = self.name(node), f"rk{self.tag}v{node}"
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self._bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def isolate(self, node_id: int) -> None:
        """Cut ``node_id`` off from every other node (clients still reach it)."""
        if node_id in self._isolated:
            return
        for peer in self._ids:
            if peer != node_id:
                _ip("-n", self.name(node_id), "route", "add", "blackhole", self.address(peer))
        self._isolated.add(node_id)

    def reconnect(self, node_id: int) -> None:
        if node_id not in self._isolated:
            return
        for peer in self._ids:
            if peer != node_id:
                _ip("-n", self.name(node_id), "route", "del", "blackhole", self.address(peer))
        self._isolated.discard(node_id)

    @property
    def isolated(self) -> set[int]:
        return set(self._isolated)

    def remove(self) -> None:
        for made in reversed(self._made):
            if made == "bridge":
                subprocess.run(
                    ["ip", "link", "del", self._bridge], capture_output=True, check=False
                )
            else:  # deleting a namespace deletes its end of the veth pair, and so both ends
                subprocess.run(["ip", "netns", "del", made], capture_output=True, check=False)
        self._made.clear()
