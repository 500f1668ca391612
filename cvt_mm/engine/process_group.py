"""Starting and ending the process group of ``--launcher pytorch`` (torchrun) and ``slurm``,
in a way restarts and requeues cannot hang on."""
import gc
import os
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as torch_dist
from torch.distributed.constants import default_pg_timeout

__all__ = ['init_process_group', 'finish_distributed']


def init_process_group(backend: str, timeout: Optional[timedelta] = None) -> None:
    """``torch.distributed.init_process_group`` from the ``env://`` variables; under torchrun,
    in a store namespace of this attempt's own, and with one restart count on every process.

    torchrun keeps one store for the whole job (its static rendezvous always, its c10d one by
    default). After a restart, the new processes would find the failed attempt's keys in it,
    and one that reads a dead peer's address waits in ``init_process_group`` until the
    timeout. On one node, prefixing the keys with the restart count
    (``TORCHELASTIC_RESTART_COUNT``) gives every attempt a clean namespace. That count is
    each node's agent's own, though: after a failure on one node only that node's agent
    counts a restart; the others restart at the same count, so their prefixes differ and the
    ranks wait on each other until the timeout. Across nodes the store is therefore not
    shared (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, as tools/dist_train.sh sets with
    ``MAX_RESTARTS``): rank 0 of each attempt then serves a new store, on a port the
    rendezvous chooses for that round, and no prefix is needed.

    Once the group is up, every process takes the largest restart count of the job into
    ``TORCHELASTIC_RESTART_COUNT``, so that all of them decide alike whether to resume
    (:func:`choose_resume`).

    Raises:
        RuntimeError: restarts across nodes on a store shared with the agents, where a
            restart would hang; naming the variable that avoids it.
    """
    timeout = timeout or default_pg_timeout
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT')
    if attempt is None:
        torch_dist.init_process_group(backend=backend, timeout=timeout)
        return
    rank, world_size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    agent_store = os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True'
    nodes = int(os.environ.get('GROUP_WORLD_SIZE', '1'))
    if agent_store and nodes > 1 and int(os.environ.get('TORCHELASTIC_MAX_RESTARTS', '0')):
        raise RuntimeError(
            f'torchrun restarts on {nodes} nodes with the store shared by the agents: after a '
            'restart the nodes would count different attempts and wait on each other until '
            'the timeout. Start torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and '
            '--rdzv-backend=c10d (tools/dist_train.sh does so when MAX_RESTARTS > 0).')
    # The agents' store (clients only), or, not shared, a new one that rank 0 serves.
    serve = rank == 0 and not agent_store
    store = torch_dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']),
                                world_size, is_master=serve, timeout=timeout,
                                multi_tenant=serve)
    namespace = f'cvt_mm/attempt_{attempt}' if agent_store else 'cvt_mm'
    torch_dist.init_process_group(
        backend=backend, store=torch_dist.PrefixStore(namespace, store),
        rank=rank, world_size=world_size, timeout=timeout)
    count = torch.tensor([int(attempt)], dtype=torch.int64,
                         device='cuda' if 'nccl' in backend else 'cpu')
    torch_dist.all_reduce(count, op=torch_dist.ReduceOp.MAX)
    os.environ['TORCHELASTIC_RESTART_COUNT'] = str(int(count.item()))


def finish_distributed(wait: bool = True) -> None:
    """Wait for every process, then tear the process group down before the interpreter exits.

    Left to interpreter shutdown, gloo's threads are sometimes destroyed while still joinable
    and the process aborts ("terminate called without an active exception", exit -6) after
    a run that finished. ``destroy_process_group`` only ends them once nothing else holds the
    group, and the runner's DDP wrapper does (its ``Reducer``): a finished runner lives on in
    reference cycles until collected, so it is collected here first. The caller must hold no
    reference to the runner itself (tools/train.py and tools/test.py build and run it in a
    call that has returned).

    Args:
        wait (bool): a barrier first. Defaults to True. False after a preemption checkpoint,
            whose hook has waited for every rank already and whose peers may be gone.
    """
    if torch_dist.is_available() and torch_dist.is_initialized():
        gc.collect()
        if wait:
            torch_dist.barrier()
        torch_dist.destroy_process_group()
