"""Faults of the host around the processes (root only): a node behind a network namespace whose link
is taken down or silently drops every packet, and a small file system under the server's data dir
that can be filled to the last byte.

Tools: iproute2's `ip` (namespaces, veth pairs) and `tc`. The drop is a `pfifo` queue of length 0 on
both ends of the veth pair: every packet is discarded without a word, as in a silent partition (this
needs no netem, iptables or nft, which many kernels and images lack).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def is_root() -> bool:
    return os.geteuid() == 0


def run_in(ns: str | None, *cmd, check=True) -> subprocess.CompletedProcess:
    """`cmd` in network namespace `ns` (None: this one); RuntimeError with its stderr if it fails."""
    full = ["ip", "netns", "exec", ns, *cmd] if ns else list(cmd)
    p = subprocess.run(full, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(full)}: {p.stderr.strip()}")
    return p


class NetNode:
    """A node agent on its own network host: a namespace joined to this one by a veth pair."""

    def __init__(self, name="dchaos", host_ip="10.251.7.1", node_ip="10.251.7.2"):
        self.name, self.host_ip, self.node_ip = name, host_ip, node_ip
        self.veth_h, self.veth_n = f"{name}-h", f"{name}-n"
        self.cut: str | None = None  # "down" or "drop" while a partition holds

    @staticmethod
    def missing() -> str | None:
        """Why this host cannot make one, or None."""
        if not is_root():
            return "network namespaces need root"
        if shutil.which("ip") is None:
            return "network namespaces need iproute2 (`ip`)"
        return None

    @staticmethod
    def can_drop() -> bool:
        return shutil.which("tc") is not None

    def _run(self, *cmd, ns=False, check=True):
        return run_in(self.name if ns else None, *cmd, check=check)

    def create(self) -> "NetNode":
        self.delete()
        self._run("ip", "netns", "add", self.name)
        self._run("ip", "link", "add", self.veth_h, "type", "veth", "peer", "name", self.veth_n)
        self._run("ip", "link", "set", self.veth_n, "netns", self.name)
        self._run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.veth_h)
        self._run("ip", "link", "set", self.veth_h, "up")
        self._run("ip", "addr", "add", f"{self.node_ip}/24", "dev", self.veth_n, ns=True)
        self._run("ip", "link", "set", self.veth_n, "up", ns=True)
        self._run("ip", "link", "set", "lo", "up", ns=True)
        return self

    @property
    def prefix(self) -> tuple[str, ...]:
        """Runs a command inside the namespace (`ip netns exec` execs it: the pid is the command's)."""
        return ("ip", "netns", "exec", self.name)

    def partition(self, how: str) -> None:
        """Cut the node off: "down" takes its link down, "drop" silently discards every packet."""
        if how == "down":
            self._run("ip", "link", "set", self.veth_n, "down", ns=True)
        elif how == "drop":
            self._run("tc", "qdisc", "replace", "dev", self.veth_n, "root", "pfifo", "limit", "0", ns=True)
            self._run("tc", "qdisc", "replace", "dev", self.veth_h, "root", "pfifo", "limit", "0")
        else:
            raise ValueError(how)
        self.cut = how

    def heal(self) -> None:
        if self.cut == "down":
            self._run("ip", "link", "set", self.veth_n, "up", ns=True)
        elif self.cut == "drop":
            self._run("tc", "qdisc", "del", "dev", self.veth_n, "root", ns=True, check=False)
            self._run("tc", "qdisc", "del", "dev", self.veth_h, "root", check=False)
        self.cut = None

    def delete(self) -> None:
        subprocess.run(["ip", "link", "del", self.veth_h], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


class DataDisk:
    """A tmpfs of `size_mb` mounted on the server's data dir, so that the AOF can meet a full disk
    without touching the machine's own disks. fill() takes every free byte with one fallocated file;
    free() deletes it."""

    def __init__(self, path: Path, size_mb: int = 256):
        self.path, self.size_mb = Path(path), size_mb
        self.mounted = False
        self.filler = self.path / "chaos-filler"

    @staticmethod
    def missing() -> str | None:
        if not is_root():
            return "a full disk needs root (to mount a small tmpfs under the server's data dir)"
        if shutil.which("mount") is None or shutil.which("umount") is None:
            return "a full disk needs mount and umount"
        return None

    def mount(self) -> "DataDisk":
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", "chaos-aof",
                        str(self.path)], check=True, capture_output=True)
        self.mounted = True
        return self

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Take every free byte; returns the bytes left free (0 when full)."""
        free = self.free_bytes()
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, free)
            except OSError:
                pass
            # whatever fallocate could not take, in small writes until the file system says no
            block = b"\0" * 4096
            try:
                while True:
                    os.lseek(fd, 0, os.SEEK_END)
                    os.write(fd, block)
            except OSError:
                pass
        finally:
            os.close(fd)
        return self.free_bytes()

    def free(self) -> None:
        try:
            self.filler.unlink()
        except FileNotFoundError:
            pass

    def unmount(self) -> None:
        self.free()
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False


class Lan:
    """Test hosts on one LAN: a bridge in this namespace (its address `host_ip`, where a server here
    listens for them) and one network namespace per host, each with an `eth0` on the bridge (the same
    interface name on every host, as on a cluster's nodes). Hosts reach each other and this one."""

    def __init__(self, names: list[str], prefix: str = "dlan", subnet: str = "10.251.30"):
        self.bridge, self.subnet = f"{prefix}-br", subnet
        self.host_ip = f"{subnet}.1"
        self.hosts = {name: (f"{prefix}-{name}", f"{subnet}.{i + 2}") for i, name in enumerate(names)}

    def _run(self, *cmd, ns: str | None = None, check=True):
        return run_in(ns, *cmd, check=check)

    def create(self) -> "Lan":
        self.delete()
        self._run("ip", "link", "add", self.bridge, "type", "bridge")
        self._run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        self._run("ip", "link", "set", self.bridge, "up")
        for ns, ip in self.hosts.values():
            here, there = f"{ns}-h", f"{ns}-n"
            self._run("ip", "netns", "add", ns)
            self._run("ip", "link", "add", here, "type", "veth", "peer", "name", there)
            self._run("ip", "link", "set", here, "master", self.bridge)
            self._run("ip", "link", "set", here, "up")
            self._run("ip", "link", "set", there, "netns", ns)
            self._run("ip", "link", "set", there, "name", "eth0", ns=ns)
            self._run("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
            self._run("ip", "link", "set", "eth0", "up", ns=ns)
            self._run("ip", "link", "set", "lo", "up", ns=ns)
        return self

    def address(self, name: str) -> str:
        return self.hosts[name][1]

    def prefix(self, name: str) -> tuple[str, ...]:
        """Runs a command on host `name` (`ip netns exec` execs it: the pid is the command's)."""
        return ("ip", "netns", "exec", self.hosts[name][0])

    def delete(self) -> None:
        for ns, _ in self.hosts.values():
            subprocess.run(["ip", "link", "del", f"{ns}-h"], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
