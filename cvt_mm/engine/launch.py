"""What tools/train.py and tools/test.py share: turning launcher flags into MMEngine config
and making PyTorch distributed work on CPU-only machines.

MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` and defaults to NCCL, and its
DDP wrapper passes ``device_ids=[LOCAL_RANK]``; all three fail without a GPU. On such a machine
we start the same ``torch.distributed`` process group with the gloo backend ourselves (MMEngine
then sees it initialised and skips its own init) and wrap the model in
``cvt_mm.engine.distributed.CPUDistributedDataParallel`` (DDP with ``device_ids=None``,
SyncBN reverted to BN).
"""
import os
import os.path as osp
import re
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as torch_dist
from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log
from torch.distributed.constants import default_pg_timeout

from .allocator import reuse_freed_memory
from .data import guard_dataloader_workers

__all__ = ['set_local_rank_env', 'config_from_args', 'check_dataset_paths', 'first_slurm_host',
           'slurm_environment', 'init_process_group', 'prepare_distributed',
           'prepare_training', 'choose_resume', 'finish_distributed', 'build_runner',
           'guard_dataloader_workers']


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


def prepare_distributed(cfg, launcher: str) -> None:
    """Make ``--launcher`` work before the runner is built.

    ``slurm``: the torch.distributed environment is set from slurm's (:func:`slurm_environment`,
    no ``scontrol`` needed). ``pytorch`` (torchrun) and ``slurm``: the process group is started
    here, so that a restarted attempt cannot hang on the failed one's keys
    (:func:`init_process_group`) and rank 0 can share its choice of checkpoint
    (:func:`choose_resume`); MMEngine then skips its own init. Without CUDA (``pytorch`` or
    ``slurm``): the process group uses gloo and the model is wrapped in
    :class:`~cvt_mm.engine.distributed.CPUDistributedDataParallel`.
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


# MMEngine's loops and the subclasses that resume them exactly (cvt_mm.engine.loops).
RESUMABLE_LOOPS = {'EpochBasedTrainLoop': 'ResumableEpochBasedTrainLoop',
                   'IterBasedTrainLoop': 'ResumableIterBasedTrainLoop'}
# Hooks every training run gets (a config that lists one keeps its own settings).
TRAINING_HOOKS = ('FiniteLossHook', 'ExactResumeHook', 'PreemptionHook', 'HeartbeatHook')


def prepare_training(cfg) -> None:
    """What ``tools/train.py`` adds to any training config, in place:

    * MMEngine's epoch- and iteration-based loops become their resumable subclasses
      (:mod:`cvt_mm.engine.loops`: exact mid-epoch resume, per-sample augmentation seeds,
      data workers that die with their process); other loops are kept, with a warning;
    * the hooks :data:`TRAINING_HOOKS`: stop at a non-finite loss, save and restore every
      rank's random states, checkpoint and exit on SIGTERM/SIGUSR1, record progress;
    * validation and test data workers die with their process too.
    """
    loop = cfg.get('train_cfg')
    if loop is not None:
        loop_type = loop.get('type')
        if loop_type is None:  # MMEngine's short form: dict(by_epoch=..., max_...)
            loop_type = 'EpochBasedTrainLoop' if loop.pop('by_epoch', False) else \
                'IterBasedTrainLoop'
        if loop_type in RESUMABLE_LOOPS:
            loop_type = RESUMABLE_LOOPS[loop_type]
        elif loop_type not in RESUMABLE_LOOPS.values():
            print_log(f'train_cfg type {loop_type!r} is not one of MMEngine\'s two loops: it '
                      'is kept, and a resume continues at epoch boundaries only',
                      logger='current', level=30)
        loop['type'] = loop_type
    hooks = list(cfg.get('custom_hooks') or [])
    present = {hook.get('type') for hook in hooks}
    hooks += [dict(type=name) for name in TRAINING_HOOKS if name not in present]
    cfg.custom_hooks = hooks
    for name in ('val_dataloader', 'test_dataloader'):
        guard_dataloader_workers(cfg.get(name))


def _say(message: str) -> None:
    """Print once per job (rank 0), before MMEngine's logger exists."""
    if os.environ.get('RANK', '0') == '0':
        print(message, flush=True)


def _choose_checkpoint(cfg, resume, restarted: bool) -> tuple:
    """(path or None, the checkpoint's seed or None), and the log lines; see
    :func:`choose_resume`."""
    from ..checkpoint.io import reading_once
    from ..checkpoint.loading import read_checkpoint
    from .resume import describe_restart, find_resumable_checkpoint
    # The candidates, the chosen file's seed and the restart message read each file once.
    with reading_once():
        path = None
        if resume == 'auto' or restarted:
            path, skipped = find_resumable_checkpoint(cfg.work_dir)
            for line in skipped:
                _say(f'--resume: {line}')
            if restarted:
                _say(describe_restart(cfg.work_dir, path))
            if path is None and resume not in (None, 'auto'):
                path = resume  # restarted before the first checkpoint: the file asked for
        elif resume is not None:
            path = resume
        if path is None:
            if resume == 'auto':
                _say(f'--resume: no checkpoint to resume from in {cfg.work_dir}; training '
                     'starts at the beginning')
            return None, None
        checkpoint = read_checkpoint(path)  # a clear error for a missing or damaged file
        if not restarted:
            _say(f'--resume: resuming from {path}')
        return path, checkpoint.get('meta', {}).get('seed')


def choose_resume(cfg, resume) -> None:
    """Decide what the run continues from, in place (``cfg.resume``, ``cfg.load_from``,
    ``cfg.randomness.seed``), and say it.

    * ``resume='auto'`` (``--resume`` without a file): the newest complete checkpoint of the
      work dir (:func:`~cvt_mm.engine.resume.find_resumable_checkpoint`), or the start.
    * a path: that checkpoint (a clear error when it cannot be read).
    * after a torchrun restart or a slurm requeue (:func:`~cvt_mm.engine.resume.restart_count`
      > 0): the newest complete checkpoint of the work dir whatever was passed, since the
      failed attempt may have written newer ones; the log line says which, and how much work
      the failure cost (:func:`~cvt_mm.engine.resume.describe_restart`).

    When resuming, a config without a fixed seed takes the checkpoint's, so the data order
    and the per-sample augmentation seeds continue as before.

    When the process group is up (``tools/train.py`` starts it before this, for torchrun and
    slurm: :func:`prepare_distributed`), rank 0 alone chooses and every rank takes its choice,
    or its error: ranks looking on their own could see different files (a save landing in
    between) and resume from different iterations. Without a process group (a Runner built
    by other code) each rank chooses for itself.

    Args:
        cfg (Config): the run's config.
        resume (str | None): ``'auto'``, a checkpoint path, or None (no ``--resume``).
    """
    from .preemption import flag_group
    from .resume import restart_count
    restarted = restart_count() > 0
    shared = torch_dist.is_available() and torch_dist.is_initialized() and \
        torch_dist.get_world_size() > 1
    choice = [None, None, None]  # path, seed, error
    if not shared or torch_dist.get_rank() == 0:
        try:
            choice[:2] = _choose_checkpoint(cfg, resume, restarted)
        except Exception as err:  # noqa: BLE001 - every rank raises it, below
            if not shared:
                raise
            choice[2] = err
    if shared:
        torch_dist.broadcast_object_list(choice, src=0, group=flag_group())
    path, seed, error = choice
    if error is not None:
        raise error
    if path is None:
        if resume == 'auto':
            cfg.load_from = None
        cfg.resume = False
        return
    cfg.resume = True
    cfg.load_from = path
    randomness = cfg.get('randomness') or ConfigDict()
    if randomness.get('seed') is None and seed is not None:
        randomness['seed'] = seed
        cfg.randomness = randomness


def finish_distributed() -> None:
    """Wait for every process, then tear the process group down before the interpreter exits.
    Left to interpreter shutdown, gloo's threads are sometimes destroyed while still joinable
    and the process aborts ("terminate called without an active exception", exit -6) after
    a run that finished."""
    if torch_dist.is_available() and torch_dist.is_initialized():
        torch_dist.barrier()
        torch_dist.destroy_process_group()


def build_runner(cfg):
    """``Runner.from_cfg`` unless the config names its own ``runner_type``, in a process
    whose malloc reuses large freed blocks (:func:`~cvt_mm.engine.allocator.reuse_freed_memory`,
    logged; ``CVT_MM_MALLOC=system`` opts out)."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner
    allocator = reuse_freed_memory()  # before the data workers fork and tensors grow
    runner = RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
    runner.logger.info(f'CPU allocator: {allocator}')
    return runner
