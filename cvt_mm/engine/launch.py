"""Launch set-up, in one place: what ``tools/train.py`` and ``tools/test.py`` do around
MMEngine's ``Runner`` (as MMDetection's tools: parse, ``Config``, ``Runner.from_cfg(cfg).train()``).

* :func:`config_from_args`: the command line applied to the config;
* :func:`setup_launch`: the data on disk (:func:`check_dataset_paths`), ``--launcher`` made to
  work (:func:`prepare_distributed`: slurm's environment, a process group that restarts cannot
  hang on, DDP without CUDA) and, for training, the checkpoint to resume
  (:func:`~cvt_mm.engine.resume.choose_resume`);
* :func:`build_runner`, and :func:`run_and_finish`, which ends the process group and turns a
  preemption into exit code 75.

``import cvt_mm`` does not load this module.

Example (what ``tools/train.py`` does)::

    cfg = config_from_args(args)
    setup_launch(cfg, args.config, train=True, resume=args.resume)
    run_and_finish(lambda: build_runner(cfg).train())
"""
import gc
import os
import os.path as osp
import re
from datetime import timedelta
from typing import Callable, Optional

import torch
import torch.distributed as torch_dist
from mmengine.config import Config, ConfigDict
from torch.distributed.constants import default_pg_timeout

from .hooks import TrainingPreempted
from .resume import choose_resume
from .workers import guard_dataloader_workers

__all__ = ['set_local_rank_env', 'config_from_args', 'setup_launch', 'build_runner',
           'cpu_allocator_note',
           'run_and_finish', 'check_dataset_paths', 'prepare_distributed', 'slurm_environment',
           'first_slurm_host', 'init_process_group', 'finish_distributed', 'DATASET_LAYOUTS']


# ----------------------------------------------------------------------------- command line
def set_local_rank_env(local_rank: int) -> None:
    # torch.distributed.launch passes --local-rank; torchrun sets LOCAL_RANK itself.
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(local_rank)


def config_from_args(args) -> Config:
    """The config with the command line's launcher, --cfg-options and work dir applied
    (default work dir: ./work_dirs/<config name>, as MMDetection's tools)."""
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    return cfg


# ----------------------------------------------------------------------------- data on disk
# Where the docs describe each dataset the configs name, and its expected layout.
DATASET_LAYOUTS = {
    'CocoDataset': ('COCO 2017 in MMDetection\'s layout',
                    ['data/coco/annotations/instances_{train,val}2017.json',
                     'data/coco/{train,val}2017/*.jpg'],
                    'docs/detection_segmentation.md, "Data"'),
    'ADE20KDataset': ('ADE20K (ADEChallengeData2016) in MMSegmentation\'s layout',
                      ['data/ade/ADEChallengeData2016/images/{training,validation}/*.jpg',
                       'data/ade/ADEChallengeData2016/annotations/{training,validation}/*.png'],
                      'docs/detection_segmentation.md, "Data"'),
    'ImageNet': ('ImageNet-1k in MMPretrain\'s layout',
                 ['data/imagenet/{train,val}/ (class folders, or with meta/{train,val}.txt)'],
                 'docs/pretraining.md, "Data"'),
}


def _dataset_paths(dataset) -> list:
    """(dataset type, [paths it reads]) of a dataset config, through wrappers."""
    while 'dataset' in dataset:  # RepeatDataset, ClassBalancedDataset, ...
        dataset = dataset['dataset']
    if 'datasets' in dataset:  # ConcatDataset
        return [p for d in dataset['datasets'] for p in _dataset_paths(d)]
    root = dataset.get('data_root') or ''
    if '://' in str(root):
        return []  # a remote backend: nothing to check on this disk
    paths = []
    if dataset.get('ann_file'):
        paths.append(osp.join(root, dataset['ann_file']))
    prefix = dataset.get('data_prefix') or {}
    for value in (prefix.values() if isinstance(prefix, dict) else [prefix]):
        if value:
            paths.append(osp.join(root, value))
    if not paths and dataset.get('split'):  # MMPretrain's ImageNet: data_root/<split>/
        paths.append(osp.join(root, dataset['split']))
    if not paths and root:
        paths.append(root)
    return [(dataset.get('type', '?'), p) for p in paths]


def check_dataset_paths(cfg, dataloaders, config_path: str) -> None:
    """Stop with one message, before anything is built, when the data the config reads is
    not on disk: which paths are missing, the layout the docs describe, and how to point
    the config elsewhere. Remote data roots (``s3://``...) are not checked."""
    missing, types = [], []
    for name in dataloaders:
        loader = cfg.get(name)
        if not loader or 'dataset' not in loader:
            continue
        for dataset_type, path in _dataset_paths(loader['dataset']):
            types.append(dataset_type)
            if not osp.exists(path):
                missing.append(f'  {name}: {path}')
    if not missing:
        return
    lines = [f'error: the data of {config_path} is not where the config looks for it '
             f'(relative paths are taken from {osp.abspath(".")}):', *missing]
    for dataset_type in dict.fromkeys(types):
        if dataset_type in DATASET_LAYOUTS:
            what, layout, where = DATASET_LAYOUTS[dataset_type]
            lines += [f'Expected: {what}:', *(f'    {p}' for p in layout),
                      f'  Getting it: {where}.']
    roots = ' '.join(f'{name}.dataset.data_root=/path/to/data/' for name in dataloaders
                     if cfg.get(name))
    lines += ['Point the config at your copy: add --cfg-options ' + roots
              + (' (and val_evaluator.ann_file / test_evaluator.ann_file for COCO)'
                 if 'CocoDataset' in types else '')
              + f", or write a config of your own with _base_ = '{config_path}' that sets them."]
    raise SystemExit('\n'.join(lines))


# ------------------------------------------------------------------------------------ slurm
def first_slurm_host(nodelist: str) -> str:
    """The first host name of a slurm node list (``SLURM_NODELIST``), expanded as
    ``scontrol show hostnames`` does, without needing ``scontrol``.

    Example::

        >>> first_slurm_host('gpu-a[07-09,12],gpu-b3')
        'gpu-a07'
    """
    first, depth = '', 0
    for char in nodelist.strip():
        if char == ',' and depth == 0:
            break
        depth += (char == '[') - (char == ']')
        first += char
    if not first or depth:
        raise ValueError(f'cannot read the slurm node list {nodelist!r}; expected names such '
                         "as 'node1', 'node[01-04]' or 'rack[1-2]-gpu[1,3]'")
    # Each bracket holds ranges; the first host takes the start of each first range.
    return re.sub(r'\[([^\]]*)\]', lambda m: m.group(1).split(',')[0].split('-')[0], first)


def slurm_environment(environ=None) -> dict:
    """The ``torch.distributed`` environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT) of a task started by ``srun``, from what slurm gives it (SLURM_PROCID,
    SLURM_NTASKS, SLURM_LOCALID, SLURM_NODELIST, SLURM_JOB_ID). MASTER_ADDR and MASTER_PORT
    already set are kept; by default the master is the node list's first host and the port
    is 20000 + the job id modulo 10000, so two jobs that share a node do not collide.

    Raises:
        ValueError: naming the slurm variables that are missing.
    """
    env = os.environ if environ is None else environ
    missing = [k for k in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST') if k not in env]
    if missing:
        raise ValueError(f'--launcher slurm: {", ".join(missing)} not set; start the job '
                         'with srun (tools/slurm_train.sh), or use --launcher pytorch '
                         '(tools/dist_train.sh)')
    job = env.get('SLURM_JOB_ID', '')
    return dict(
        RANK=env['SLURM_PROCID'], WORLD_SIZE=env['SLURM_NTASKS'],
        LOCAL_RANK=env.get('SLURM_LOCALID', '0'),
        MASTER_ADDR=env.get('MASTER_ADDR') or first_slurm_host(env['SLURM_NODELIST']),
        MASTER_PORT=env.get('MASTER_PORT') or str(20000 + int(job) % 10000 if job.isdigit()
                                                  else 29500))


# ---------------------------------------------------------------------------- process group
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


# ------------------------------------------------------------------------------- --launcher
def prepare_distributed(cfg, launcher: str) -> None:
    """Make ``--launcher`` work before the runner is built.

    ``slurm``: the torch.distributed environment is set from slurm's (:func:`slurm_environment`,
    no ``scontrol`` needed). ``pytorch`` (torchrun) and ``slurm``: the process group is started
    here, so that a restarted attempt cannot hang on the failed one's keys
    (:func:`init_process_group`) and rank 0 can share its choice of checkpoint
    (:func:`choose_resume`); MMEngine then skips its own init. Without CUDA (``pytorch`` or
    ``slurm``): the process group uses gloo and the model is wrapped in
    :class:`~cvt_mm.engine.cpu_ddp.CPUDistributedDataParallel`.
    """
    if launcher == 'slurm':
        os.environ.update(slurm_environment())
    if launcher == 'none':
        return
    dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg') or {}
    timeout = dist_cfg.get('timeout')
    timeout = timedelta(seconds=timeout) if isinstance(timeout, (int, float)) else timeout
    if torch.cuda.is_available():
        if launcher in ('pytorch', 'slurm') and not torch_dist.is_initialized():
            torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', 0)))
            init_process_group(dist_cfg.get('backend', 'nccl'), timeout)
        return
    if launcher not in ('pytorch', 'slurm'):
        raise ValueError(f'--launcher {launcher} needs GPUs; on a CPU-only machine use '
                         '--launcher pytorch (tools/dist_train.sh), slurm or none')
    if not torch_dist.is_initialized():
        init_process_group('gloo', timeout)
    wrapper = cfg.get('model_wrapper_cfg') or ConfigDict(
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    if wrapper.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
        wrapper['type'] = 'CPUDistributedDataParallel'
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper


# ----------------------------------------------------------------------------------- runner
def cpu_allocator_note(environ=None) -> str:
    """How this process's glibc malloc treats large freed blocks, for the log: reused where
    it started with ``MALLOC_MMAP_MAX_=0`` (the launchers source tools/misc/cpu_malloc.sh),
    else glibc's default, which page-faults each large CPU tensor afresh."""
    environ = os.environ if environ is None else environ
    if environ.get('MALLOC_MMAP_MAX_') == '0':
        return 'large freed blocks reused (MALLOC_MMAP_MAX_=0: tools/misc/cpu_malloc.sh)'
    return ("glibc's default (on a CPU, `bash tools/misc/cpu_malloc.sh python tools/train.py "
            '...` and the launchers reuse large freed blocks: docs/benchmarks.md, "CPU '
            'allocator")')


def build_runner(cfg):
    """``RUNNERS.build(cfg)`` when the config names a ``runner_type`` (as MMDetection's tools),
    otherwise :class:`~cvt_mm.engine.runner.ExactResumeRunner` (a config that is not built on
    ours); the log names the CPU allocator setting (:func:`cpu_allocator_note`)."""
    from mmengine.registry import RUNNERS

    from .runner import ExactResumeRunner
    runner = RUNNERS.build(cfg) if 'runner_type' in cfg else ExactResumeRunner.from_cfg(cfg)
    runner.logger.info(f'CPU allocator: {cpu_allocator_note()}')
    return runner


# ---------------------------------------------------------------------------------- the tools
def setup_launch(cfg, config_path: str, train: bool, resume: Optional[str] = None) -> None:
    """Everything between the config and the runner, for ``tools/train.py`` (``train=True``)
    and ``tools/test.py``: the datasets the run reads checked on disk (training: train and,
    with a ``val_cfg``, val; testing: test, whose data workers then die with their process),
    ``--launcher`` made to work (:func:`prepare_distributed`) and, for training, the
    checkpoint to continue from (:func:`~cvt_mm.engine.resume.choose_resume`: ``resume``
    is ``--resume``'s value, ``'auto'`` without one).

    Args:
        cfg (Config): from :func:`config_from_args` (its ``launcher`` set); changed in place.
        config_path (str): the config file, for messages.
        train (bool): set up a training run, else a test run.
        resume (str, optional): ``--resume``. Default None.
    """
    if train:
        dataloaders = ['train_dataloader'] + (['val_dataloader'] if cfg.get('val_cfg') else [])
    else:
        dataloaders = ['test_dataloader']
    check_dataset_paths(cfg, dataloaders, config_path)
    if not train:
        guard_dataloader_workers(cfg.get('test_dataloader'))
    prepare_distributed(cfg, cfg.launcher)
    if train:
        choose_resume(cfg, resume)


def run_and_finish(run: Callable[[], object]) -> None:
    """Call ``run`` (which builds and runs the runner, so that nothing else holds it), then
    end the process group (:func:`finish_distributed`). After a preemption checkpoint
    (``TrainingPreempted``, from SIGTERM/SIGUSR1) the group ends without waiting for peers
    that may be gone, and the exception is raised again: exit code 75."""
    try:
        run()
    except TrainingPreempted as stop:
        # The traceback's frames would keep the runner, and so the process group, alive.
        preempted = stop.with_traceback(None)
    else:
        preempted = None
    finish_distributed(wait=preempted is None)
    if preempted is not None:
        raise preempted
