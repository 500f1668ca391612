"""Two nodes with addresses and host names of their own: two Linux network namespaces joined
by a veth pair (10.231.0.1 and 10.231.0.2 on ``cvt0``, host names node0 and node1), sharing
the file system as a cluster's nodes share theirs, each running ``tools/dist_train.sh`` as a
user runs it on a node. The processes of each node run under
``ip netns exec NS unshare -u bash -c 'hostname nodeN; exec ...'``.

Neither host name resolves (there is no name service inside the namespaces), which is what
torch's guesses rely on: the store host, and the workers' master address. The training is
the narrow Mask R-CNN of tests/cluster_runs.py, one process per node. Needs root and
``ip netns``; the namespaces are removed at the end, also after a failure."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cluster_runs import (
    BASE_ENV,
    assert_same_weights,
    children,
    command_line,
    drop_checkpoints,
    exact_config,
    launcher_pid,
    local_rank,
    make_cluster_data,
    pointer_is,
    wait_for,
)
from helpers import PACED_ENV, ROOT, executed_iterations, free_port

pytestmark = pytest.mark.slow

# Inside the test's own namespaces only: never assigned in the root namespace.
ADDRESSES = ('10.231.0.1', '10.231.0.2')
INTERFACE = 'cvt0'
RUN_TIMEOUT = 600


class Nodes:
    """The two namespaces, and the node processes started in them."""

    def __init__(self, names):
        self.names = names
        self.shells = []

    def start(self, node: int, args, log, env) -> subprocess.Popen:
        """``bash ARGS`` on node ``node`` (its namespace, its host name) from the checkout,
        with the cluster tests' environment and ``env``."""
        full = dict(os.environ, **BASE_ENV, **env)
        full['PYTHONPATH'] = os.pathsep.join([ROOT, PACED_ENV['PYTHONPATH'],
                                              full.get('PYTHONPATH', '')])
        # No host name resolves in the namespaces: gloo would otherwise fall back to the
        # loopback interface, which does not reach the other node.
        full['GLOO_SOCKET_IFNAME'] = INTERFACE
        shell = subprocess.Popen(
            ['ip', 'netns', 'exec', self.names[node], 'unshare', '-u', 'bash', '-c',
             f'hostname node{node} && exec bash "$@"', 'bash', *args],
            cwd=ROOT, env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.shells.append(shell)
        return shell

    def kill_all(self) -> None:
        """SIGKILL what the test started: its process groups, then whatever still lives in
        its namespaces (a namespace lives on while a process is in it)."""
        for shell in self.shells:
            if shell.poll() is None:
                try:
                    os.killpg(shell.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for name in self.names:
            pids = subprocess.run(['ip', 'netns', 'pids', name], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _ip(*args) -> subprocess.CompletedProcess:
    return subprocess.run(['ip', *args], capture_output=True, text=True)


@pytest.fixture(scope='module')
def nodes():
    """Two network namespaces joined by a veth pair, each end ``cvt0`` with its address;
    removed at the end (after killing what runs in them), also when a test fails."""
    if os.geteuid() != 0:
        pytest.skip('two-node tests make network namespaces: they need root')
    for tool in ('ip', 'unshare'):
        if shutil.which(tool) is None:
            pytest.skip(f'two-node tests need `{tool}` (iproute2, util-linux)')
    names = [f'cvtmm{os.getpid()}n{n}' for n in range(2)]
    made = []
    try:
        for name in names:
            result = _ip('netns', 'add', name)
            if result.returncode:
                pytest.skip(f'`ip netns add` does not work here: {result.stderr.strip()}')
            made.append(name)
        steps = [('link', 'add', INTERFACE, 'netns', names[0], 'type', 'veth', 'peer', 'name',
                  INTERFACE, 'netns', names[1])]
        for name, address in zip(names, ADDRESSES):
            steps += [('-n', name, 'addr', 'add', f'{address}/24', 'dev', INTERFACE),
                      ('-n', name, 'link', 'set', 'lo', 'up'),
                      ('-n', name, 'link', 'set', INTERFACE, 'up')]
        for step in steps:
            result = _ip(*step)
            assert result.returncode == 0, f'ip {" ".join(step)}: {result.stderr}'
        the_nodes = Nodes(names)
        yield the_nodes
        the_nodes.kill_all()
    finally:
        if made:
            Nodes(made).kill_all()
        for name in made:
            _ip('netns', 'del', name)
    left = _ip('netns', 'list').stdout
    assert not any(name in left for name in names), f'namespaces left behind: {left}'


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    """The cluster tests' narrow Mask R-CNN (3 iterations per epoch for two processes,
    2 epochs, checkpoints every 2 iterations, two persistent data workers per process), with
    every rank writing its own log file, named with its host."""
    root = tmp_path_factory.mktemp('netns')
    data = make_cluster_data(str(tmp_path_factory.mktemp('netns_data')))
    path = root / 'det_nodes.py'
    # DEBUG: MMEngine then writes each rank's log to the work dir, named user@host...rankN.
    path.write_text(f"_base_ = {exact_config(root, 'det', data)!r}\nlog_level = 'DEBUG'\n")
    return root, str(path)


def _node_env(node: int, port: int, **extra) -> dict:
    env = dict(NNODES='2', NODE_RANK=str(node), MASTER_ADDR=ADDRESSES[0], PORT=str(port),
               **extra)
    if node:
        env['LOCAL_ADDR'] = ADDRESSES[node]
    return env


def _train_on_both(nodes, root, name: str, cfg: str, work, **env):
    """Start ``tools/dist_train.sh`` on both nodes (one process each) into ``work``:
    (shells, per-node log paths ``root/<name>_node<n>.log``)."""
    port = free_port()
    logs = [root / f'{name}_node{n}.log' for n in range(2)]
    shells = []
    for node in range(2):
        with open(logs[node], 'w') as log:
            shells.append(nodes.start(
                node, ['tools/dist_train.sh', cfg, '1', '--work-dir', str(work)], log,
                _node_env(node, port, **env)))
    return shells, logs


def _wait_all(shells, logs) -> list:
    """Exit codes of all node processes, failing (and showing the logs) on one that is still
    running after RUN_TIMEOUT: a hang."""
    deadline = time.time() + RUN_TIMEOUT
    codes = []
    for shell in shells:
        try:
            codes.append(shell.wait(timeout=max(1.0, deadline - time.time())))
        except subprocess.TimeoutExpired:
            raise AssertionError(f'a node still runs after {RUN_TIMEOUT} s:\n'
                                 + ''.join(log.read_text()[-3000:] for log in logs))
    return codes


def _received_bytes(namespace: str) -> int:
    out = _ip('-n', namespace, '-s', 'link', 'show', INTERFACE).stdout.split('\n')
    # "RX: bytes packets ..." then the numbers on the next line.
    row = next(i for i, line in enumerate(out) if line.strip().startswith('RX:'))
    return int(out[row + 1].split()[0])


def _rank_logs(work, host: str, rank: int) -> list:
    """The texts of one rank's log files, one per attempt, oldest first."""
    paths = sorted(work.glob(f'*/*@{host}_device*_rank{rank}.log'))
    return [path.read_text() for path in paths]


def test_torch_alone_cannot_tell_which_node_hosts_the_store(nodes):
    """torch's guess when ``is_host`` is not given: compare the rendezvous address with the
    host name's addresses. Here node0 does not resolve and the guess fails outright (where it
    resolves to another interface's address, no node hosts and every agent waits); so
    tools/dist_train.sh says it from NODE_RANK (see the restart test's command lines)."""
    probe = ('import socket\n'
             'from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname\n'
             'try:\n'
             f'    print("matches", _matches_machine_hostname({ADDRESSES[0]!r}))\n'
             'except socket.gaierror as error:\n'
             '    print("fails", error)\n')
    result = subprocess.run(
        ['ip', 'netns', 'exec', nodes.names[0], 'unshare', '-u', 'bash', '-c',
         'hostname node0 && exec "$@"', 'bash', sys.executable, '-c', probe],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] != ['matches', 'True'], result.stdout


def test_two_nodes_with_their_own_addresses_train_together(nodes, config, det_reference):
    """The static rendezvous (no restarts): node 0 at MASTER_ADDR hosts the store, one set of
    checkpoints in the shared work dir, the gradients crossed the veth pair, and the weights
    end as those of the same two processes on one node (conftest's ``det_reference``), bit
    for bit."""
    root, cfg = config
    work = root / 'static'
    before = _received_bytes(nodes.names[1])
    shells, logs = _train_on_both(nodes, root, 'static', cfg, work)
    codes = _wait_all(shells, logs)
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], ''.join(t[-3000:] for t in texts)
    assert 'GPU number: 2' in texts[0]  # MMEngine's world size
    assert 'Epoch(train) [2][3/3]' in texts[0]
    assert sorted(p.name for p in work.glob('*.pth')) == ['iter_2.pth', 'iter_4.pth',
                                                          'iter_6.pth']
    assert _received_bytes(nodes.names[1]) - before > 1_000_000
    # Each node's rank wrote its log under its own host name.
    assert len(_rank_logs(work, 'node0', 0)) == 1 and len(_rank_logs(work, 'node1', 1)) == 1
    assert_same_weights(det_reference, work / 'iter_6.pth')
    drop_checkpoints(work)


def test_a_rank_killed_on_node_1_restarts_both_nodes_and_both_resume(nodes, config,
                                                                     det_reference):
    """``MAX_RESTARTS=1`` (a c10d rendezvous): node 1's training process SIGKILLed after the
    iteration-2 checkpoint, mid-epoch. Both nodes restart in time, each rank resumes from
    that checkpoint, and the weights end as those of the uninterrupted run, bit for bit."""
    root, cfg = config
    work = root / 'killed'
    shells, logs = _train_on_both(nodes, root, 'killed', cfg, work, MAX_RESTARTS='1',
                                  RDZV_ID=f'killed{os.getpid()}')
    agents = [launcher_pid(shell, 'torch.distributed.run') for shell in shells]
    # The store host is said from NODE_RANK, and node 1 names its own address.
    lines = [command_line(agent).split(b'\0') for agent in agents]
    assert b'--rdzv-conf=is_host=1' in lines[0] and b'--rdzv-conf=is_host=0' in lines[1]
    assert f'--local-addr={ADDRESSES[1]}'.encode() in lines[1]

    wait_for(pointer_is(work, 'iter_2.pth'), shells[0], 'the iteration-2 checkpoint')
    first = {node: _rank_of(agents[node]) for node in range(2)}
    for node in range(2):  # each node's rank lives in its node's network namespace
        assert os.readlink(f'/proc/{first[node]}/ns/net') == \
            f'net:[{os.stat(f"/run/netns/{nodes.names[node]}").st_ino}]'
    os.kill(first[1], signal.SIGKILL)  # mid-epoch: iteration 3 of 3
    # The restarted ranks: what each node's agent counts.
    counts = {}
    for node in range(2):
        deadline = time.time() + RUN_TIMEOUT
        while True:
            rank = _rank_of(agents[node])
            if rank not in (None, first[node]):
                counts[node] = _environ(rank).get('TORCHELASTIC_RESTART_COUNT')
                break
            assert shells[node].poll() is None and time.time() < deadline, \
                f'node {node} did not restart its rank'
            time.sleep(0.05)
    # Only node 1's agent counts the restart (cvt_mm.apis.launch.init_process_group
    # takes the largest count to every rank).
    assert counts == {0: '0', 1: '1'}
    codes = _wait_all(shells, logs)
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], ''.join(t[-3000:] for t in texts)

    # Node 0 (rank 0) says the restart and resumes, though its own agent counted none.
    assert f'resuming from {work}/iter_2.pth (iteration 2, epoch 0)' in texts[0]
    # Each node's rank log of the second attempt: resumed at iteration 2, mid-epoch, and
    # trained from there, not from the start.
    for host, rank in (('node0', 0), ('node1', 1)):
        attempts = _rank_logs(work, host, rank)
        assert len(attempts) == 2, f'{host}: {len(attempts)} attempts logged'
        assert 'resumed epoch: 0, iter: 2' in attempts[1], f'{host} did not resume'
        assert 'Resuming epoch 1 at batch 3/3' in attempts[1], f'{host} did not resume'
    assert 'Epoch(train) [1][1/3]' not in _rank_logs(work, 'node0', 0)[1]
    for rank in range(2):  # killed in iteration 3: each node's rank went on from 2
        assert executed_iterations(work, rank) == [[1, 2], [3, 4, 5, 6]]
    assert_same_weights(det_reference, work / 'iter_6.pth')
    drop_checkpoints(work)


def _rank_of(agent: int):
    """The training process (local rank 0) under a node's torchrun, or None."""
    return next((p for p in children(agent) if local_rank(p) == 0), None)


def _environ(pid: int) -> dict:
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            pairs = [v.split(b'=', 1) for v in f.read().split(b'\0') if b'=' in v]
    except OSError:
        return {}
    return {k.decode(): v.decode(errors='replace') for k, v in pairs}



def test_restarts_across_nodes_on_the_agents_shared_store_are_refused(monkeypatch):
    """torchrun's defaults (the store shared by the agents) with restarts on two nodes: the
    restart counts would differ between the nodes and the ranks wait on each other until
    the timeout; init_process_group says so at the start, naming the fix."""
    from cvt_mm.apis.launch import init_process_group
    for key, value in dict(TORCHELASTIC_RESTART_COUNT='0', TORCHELASTIC_MAX_RESTARTS='1',
                           TORCHELASTIC_USE_AGENT_STORE='True', GROUP_WORLD_SIZE='2',
                           RANK='1', WORLD_SIZE='2', MASTER_ADDR='127.0.0.1',
                           MASTER_PORT='1').items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError, match='TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1'):
        init_process_group('gloo')
