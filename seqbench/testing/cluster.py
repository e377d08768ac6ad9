"""A real multi-node Ray cluster on one machine whose worker nodes share no path with the
driver: the head and each worker are separate `ray start --block` processes with their own
temp and working folders, and each worker runs in its own mount namespace in which the
driver's folder (and the other nodes') is an empty tmpfs. What a worker reads or writes there
never reaches the driver, as on machines without a shared file system.

Linux only (mount namespaces: root, or unprivileged user namespaces); `isolation_problem`
says why not where it cannot run. For tests and `bench/ray_cluster.py`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: the seconds a node may take to join on a busy machine
START_SECONDS = 180.0


def _unshare() -> list[str]:
    """The unshare command line for a private mount namespace (a user namespace too when not
    root)."""
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]


def isolation_problem() -> str | None:
    """Why isolated nodes cannot run here (None: they can)."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux with unshare(1)"
    if shutil.which("ray") is None:
        return "the `ray` command is not on PATH"
    probe = [*_unshare(), "sh", "-c", "mount -t tmpfs none /mnt"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        return "this machine refuses a private mount namespace (unshare -m with a tmpfs)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tree_kill(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a process and all its descendants (children first found, then the parent)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(sig)


@dataclass
class Node:
    """One Ray node: its name, folder (temp dir, cwd and $SEQBENCH_NODE_DIR inside), custom
    resource and `ray start --block` process."""

    name: str
    root: Path
    proc: subprocess.Popen | None = None

    @property
    def node_dir(self) -> Path:
        """What seqbench's tasks on this node use ($SEQBENCH_NODE_DIR)."""
        return self.root / "seqbench"

    def raylet_pids(self) -> list[int]:
        import psutil

        if self.proc is None:
            return []
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [p.pid for p in kids if "raylet" in p.name()]

    def kill(self) -> None:
        """Kill the node at once (its raylet, object store and workers: SIGKILL)."""
        if self.proc is not None:
            _tree_kill(self.proc.pid)
            self.proc.wait(30)


@dataclass
class IsolatedCluster:
    """A head (no CPUs: it schedules, trains nothing) and `workers` worker nodes of one CPU
    each, worker i with the custom resource `worker<i>`; `hidden` are the driver's folders no
    worker sees."""

    root: Path
    hidden: list[Path]
    workers: int = 2
    port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        """The head's GCS address, on the IP Ray gives this machine's nodes."""
        from ray.util import get_node_ip_address

        return f"{get_node_ip_address()}:{self.port}"

    def start(self) -> IsolatedCluster:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
        env.pop("RAY_ADDRESS", None)
        head = Node("head", self.root / "head")
        head.root.mkdir(parents=True)
        cmd = ["ray", "start", "--head", f"--port={self.port}", "--num-cpus=0"]
        cmd += ["--include-dashboard=false", f"--temp-dir={head.root / 'tmp'}", "--block"]
        head.proc = self._spawn(cmd, head, env)
        self.nodes.append(head)
        self._wait(1)
        for i in range(1, self.workers + 1):
            node = Node(f"worker{i}", self.root / f"worker{i}")
            node.root.mkdir(parents=True, exist_ok=True)
            others = [n.root for n in self.nodes] + [
                self.root / f"worker{j}" for j in range(1, self.workers + 1) if j != i
            ]
            hide = " && ".join(f"mount -t tmpfs none {p}" for p in [*self.hidden, *others])
            start = ["ray", "start", f"--address={self.address}", "--num-cpus=1"]
            start += [f"--resources={json.dumps({node.name: 1})}"]
            start += [f"--temp-dir={node.root / 'tmp'}", "--block"]
            script = f"{hide} && cd {node.root} && exec {' '.join(map(_quote, start))}"
            node_env = {**env, "SEQBENCH_NODE_DIR": str(node.node_dir)}
            for p in others:
                p.mkdir(parents=True, exist_ok=True)  # a mount point must exist
            node.proc = self._spawn([*_unshare(), "sh", "-c", script], node, node_env)
            self.nodes.append(node)
            self._wait(i + 1)
        return self

    def _spawn(self, cmd: list[str], node: Node, env: dict[str, str]) -> subprocess.Popen:
        log = open(node.root / "ray-start.log", "wb")  # noqa: SIM115 (the process keeps it)
        return subprocess.Popen(
            cmd, cwd=node.root, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def _wait(self, n: int) -> None:
        """Wait until `n` nodes are alive in the cluster (asking its GCS)."""
        deadline = time.monotonic() + START_SECONDS
        probe = (
            "import ray,sys; ray.init(address=sys.argv[1], log_to_driver=False); "
            "print(sum(x['Alive'] for x in ray.nodes()))"
        )
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc is not None and node.proc.poll() is not None:
                    log = (node.root / "ray-start.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"ray node {node.name} exited: {log}")
            try:
                got = subprocess.run(
                    [sys.executable, "-c", probe, self.address],
                    capture_output=True, text=True, timeout=60,
                )  # fmt: skip
            except subprocess.TimeoutExpired:  # a GCS still starting can hang a client
                continue
            lines = got.stdout.strip().splitlines()
            if got.returncode == 0 and lines and lines[-1].isdigit() and int(lines[-1]) >= n:
                return
            time.sleep(5)
        raise RuntimeError(f"the Ray cluster did not reach {n} nodes in {START_SECONDS:.0f} s")

    def worker(self, i: int) -> Node:
        return self.nodes[i]

    def stop(self) -> None:
        """Kill every node this cluster started (its own processes only)."""
        for node in reversed(self.nodes):
            node.kill()


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
