"""Two ranks as two "nodes": each rank in a network namespace of its own (its own host name,
IPC and /dev/shm too), joined by a veth pair, so that MPI can only talk over TCP; each in its own
working folder with its own copy of the files it reads. Hydra (MPICH's mpiexec) starts the far
rank through a launcher script in place of ssh (``-launcher-exec``), as it would on a cluster.

Needs root, iproute2's ``ip netns`` and util-linux's ``unshare`` (a container without
CAP_NET_ADMIN cannot make namespaces): skipped, saying which, elsewhere; MPICH only (the
launcher options are Hydra's)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen.exports import export_trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "samples"))
import digits  # noqa: E402

pytestmark = pytest.mark.mpi

LAUNCHER = r"""#!/bin/sh
# Hydra's ssh launcher calls: -x HOST COMMAND... ; run COMMAND on that "node": its namespaces,
# its host name, its own /dev/shm, and its folder seen at the path of mpiexec's (Hydra starts
# every rank in mpiexec's working folder)
host=$2; shift 2
case $host in
{cases}
*) echo "no node $host" >&2; exit 1;;
esac
exec ip netns exec "$ns" unshare --uts --ipc --mount sh -c \
    "hostname $name && mount -t tmpfs tmpfs /dev/shm && mount --bind $dir {common} && exec $*"
"""


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if not shutil.which(tool):
            return f"{tool} is missing (iproute2, util-linux)"
    probe = f"fcprobe{os.getpid()}"
    res = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if res.returncode != 0:
        return f"ip netns add fails here: {res.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture(scope="module")
def nodes(toolchain, tmp_path_factory):
    """Two namespaces a and b (10.231.S.1 and .2 over a veth pair), a folder for each, and the
    mpiexec command that starts one rank on each from node a."""
    why = _why_not()
    if why:
        pytest.skip(f"two-node test: {why}")
    if toolchain.flavor != "mpich":
        pytest.skip("two-node test: Hydra's launcher options (MPICH's mpiexec) only")
    root = tmp_path_factory.mktemp("nodes")
    tag, subnet = f"fc{os.getpid() % 100000}", 10 + os.getpid() % 200
    ns = {"a": f"{tag}a", "b": f"{tag}b"}
    ip = {"a": f"10.231.{subnet}.1", "b": f"10.231.{subnet}.2"}
    veth = {"a": f"{tag}va", "b": f"{tag}vb"}
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, text=True)  # noqa: E731
    try:
        for k in "ab":
            run("ip", "netns", "add", ns[k])
        run("ip", "link", "add", veth["a"], "type", "veth", "peer", "name", veth["b"])
        for k in "ab":
            (root / k).mkdir()
            run("ip", "link", "set", veth[k], "netns", ns[k])
            run("ip", "-n", ns[k], "addr", "add", f"{ip[k]}/24", "dev", veth[k])
            run("ip", "-n", ns[k], "link", "set", veth[k], "up")
            run("ip", "-n", ns[k], "link", "set", "lo", "up")
        cases = "\n".join(f"{ip[k]}) ns={ns[k]}; name=node{k}; dir={root / k};;" for k in "ab")
        launcher = root / "launch.sh"
        launcher.write_text(LAUNCHER.format(cases=cases, common=root / "a"))
        launcher.chmod(0o755)
        hosts = f"{ip['a']},{ip['b']}"
        mpiexec = ["ip", "netns", "exec", ns["a"], toolchain.mpiexec, "-hosts", hosts, "-n", "2", "-ppn", "1",
                   "-iface", veth["a"], "-launcher", "ssh", "-launcher-exec", str(launcher)]  # fmt: skip

        def traffic() -> int:
            """Bytes node a sent over the veth pair."""
            out = run("ip", "-n", ns["a"], "-j", "-s", "link", "show", veth["a"]).stdout
            return json.loads(out)[0]["stats64"]["tx"]["bytes"]

        yield {"root": root, "mpiexec": mpiexec, "traffic": traffic}
    finally:
        for k in "ab":
            subprocess.run(["ip", "netns", "del", ns[k]], capture_output=True)


def digits_on_nodes(toolchain, nodes, tmp_path, batch: int):
    """The digits trainer (a step of ``batch`` a rank), the dataset copied to each node's folder,
    and the training's arguments: (binary, x, labels, arguments)."""
    exe = export_trainer(digits.training_graph(batch), tmp_path / "t", name="digits", mpi=True,
                         cc=toolchain.mpicc) / "digits"  # fmt: skip
    x, y, _, _ = digits.load_data()
    for k in "ab":
        np.savez(nodes["root"] / k / "data.npz", x=x[:640], labels=y[:640])
    return (
        exe,
        x,
        y,
        ["train", "--data", "data.npz", "--epochs", "2", "--seed", "5", "--checkpoint", "ck.npz"],
    )


def on_one_machine(toolchain, tmp_path, exe, x, y, args, ranks: int) -> Path:
    """The same training on ``ranks`` local ranks, in a folder of its own (returned)."""
    local = tmp_path / "local"
    local.mkdir()
    np.savez(local / "data.npz", x=x[:640], labels=y[:640])
    cmd = [*toolchain.launch(ranks), str(exe), *args]
    ref = subprocess.run(cmd, capture_output=True, text=True, cwd=local, timeout=180)
    assert ref.returncode == 0, ref.stderr
    return local


def test_training_on_two_nodes_equals_two_local_ranks(toolchain, nodes, tmp_path):
    """The data-parallel trainer, one rank a node, each reading its own copy of the dataset:
    rank 0's node alone gets the checkpoint, equal to that of 2 ranks on one machine; the
    gradients went over TCP (the veth pair carried at least the allreduces' bytes)."""
    exe, x, y, args = digits_on_nodes(toolchain, nodes, tmp_path, 16)
    before = nodes["traffic"]()
    res = subprocess.run([*nodes["mpiexec"], str(exe), *args], capture_output=True, text=True, timeout=180,
                         cwd=nodes["root"] / "a")  # fmt: skip
    assert res.returncode == 0, res.stderr
    sent = nodes["traffic"]() - before
    local = on_one_machine(toolchain, tmp_path, exe, x, y, args, 2)
    assert not (nodes["root"] / "b" / "ck.npz").exists()
    a, b = np.load(nodes["root"] / "a" / "ck.npz"), np.load(local / "ck.npz")
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    params = sum(a[n].size for n in a.files if not n.startswith("_") and a[n].dtype == np.float32)
    assert sent >= 40 * 4 * params // 2, (
        sent,
        params,
    )  # 40 steps of float32 gradients, at least half each way


def test_a_split_model_on_two_nodes(toolchain, nodes, tmp_path):
    """A model split over 2 ranks (pipeline placement), a rank a node: the input read on node a,
    each output written by the rank that makes it, in its own node's folder, equal to one
    process."""
    rng = np.random.default_rng(3)
    with gd.Graph("chain") as g:
        h = gd.placeholder("x", (8, 64))
        for _ in range(6):
            h = gd.tanh(gd.matmul(h, gd.constant((0.2 * rng.standard_normal((64, 64))).astype(np.float32))))
        g.set_outputs(gd.identity(h, name="y"))
    codegen.export(g, tmp_path / "m", name="net", ranks=2, placement="pipeline", cc=toolchain.mpicc)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    np.save(nodes["root"] / "a" / "x.npy", x)
    cmd = [*nodes["mpiexec"], str(tmp_path / "m" / "net"), "--in", "x=x.npy", "--out-dir", "res"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=nodes["root"] / "a")
    assert res.returncode == 0, res.stderr
    (want,) = gd.run(g, {"x": x}, ["y"])
    written = [k for k in "ab" if (nodes["root"] / k / "res" / "y.npy").exists()]
    assert written == ["b"], written  # the last stage's rank, on node b
    np.testing.assert_allclose(np.load(nodes["root"] / "b" / "res" / "y.npy"), want, rtol=1e-5, atol=1e-6)


def test_hierarchical_allreduce_over_two_nodes(toolchain, nodes, tmp_path):
    """4 ranks on 2 "nodes" (2 each): --allreduce hierarchical finds the nodes (the ranks that
    share memory) and trains as the flat allreduce does on one machine, to float32 rounding."""
    exe, x, y, args = digits_on_nodes(toolchain, nodes, tmp_path, 8)
    cmd = list(nodes["mpiexec"])
    cmd[cmd.index("-n") + 1], cmd[cmd.index("-ppn") + 1] = "4", "2"
    cmd += [str(exe), *args, "--allreduce", "hierarchical"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=nodes["root"] / "a")
    assert res.returncode == 0, res.stderr
    assert "--allreduce hierarchical: 2 node(s) of 4 rank(s)" in res.stdout, res.stdout
    local = on_one_machine(toolchain, tmp_path, exe, x, y, args, 4)
    a, b = np.load(nodes["root"] / "a" / "ck.npz"), np.load(local / "ck.npz")
    for name in a.files:
        if name != "__flowc__":
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)
