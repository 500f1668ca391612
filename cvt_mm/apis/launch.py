"""What ``tools/train.py`` and ``tools/test.py`` do around MMEngine's ``Runner``, in one place
(``import cvt_mm`` does not load it):

* :func:`config_from_args`: the command line applied to the config;
* :func:`setup_launch`: the data on disk checked (:func:`check_dataset_paths`), ``--launcher``
  made to work (:func:`prepare_distributed`: slurm's environment, restarts that cannot hang,
  DDP without CUDA) and, for training, the checkpoint to continue from (:func:`choose_resume`);
* :func:`build_runner`, and :func:`run_and_finish`, which ends the process group and turns a
  preemption into exit code 75.

Example (what ``tools/train.py`` does)::

    cfg = config_from_args(args)
    setup_launch(cfg, args.config, train=True, resume=args.resume)
    run_and_finish(lambda: build_runner(cfg).train())
"""
import gc
import glob
import os
import os.path as osp
import re
import signal
from datetime import timedelta
from typing import Callable, Optional

import torch
import torch.distributed as torch_dist
from mmengine.config import Config, ConfigDict
from torch.distributed.constants import default_pg_timeout

from ..checkpoint.loading import read_checkpoint
from ..engine.flags import flag_group
from ..engine.hooks import StopsOutsideTheRun, TrainingPreempted
from ..engine.workers import _die_with_parent, guard_dataloader_workers

__all__ = ['set_local_rank_env', 'config_from_args', 'setup_launch', 'build_runner',
           'run_and_finish', 'check_dataset_paths', 'prepare_distributed', 'slurm_environment',
           'first_slurm_host', 'stop_with_launcher', 'init_process_group',
           'finish_distributed', 'restart_count', 'find_resumable_checkpoint', 'choose_resume',
           'DATASET_LAYOUTS']


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
    """The first host of a slurm node list, as ``scontrol show hostnames`` gives it, without
    ``scontrol``: ``'gpu-a[07-09,12],gpu-b3'`` -> ``'gpu-a07'``."""
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
    """The ``torch.distributed`` environment of a task started by ``srun``, from slurm's
    (``environ``, default ``os.environ``). MASTER_ADDR and MASTER_PORT already set are kept;
    else the node list's first host and 20000 + the job id modulo 10000 (two jobs sharing a
    node do not collide).

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


def stop_with_launcher() -> None:
    """Under torchrun, SIGTERM this rank when torchrun dies: a SIGKILLed torchrun left its
    ranks training on, writing checkpoints beside the job resumed in their work dir. The rank
    then stops as on a preemption (a checkpoint, exit 75). ``tools/dist_train.sh`` names its
    torchrun (``CVT_MM_LAUNCHER_PID``), so that a rank whose launcher died before this call
    stops too (docs/cluster.md, "Faults at random moments")."""
    if 'TORCHELASTIC_RUN_ID' not in os.environ:
        return
    launcher = int(os.environ.get('CVT_MM_LAUNCHER_PID') or os.getppid())
    if os.getppid() != launcher:
        raise SystemExit(f'error: torchrun (pid {launcher}) ended before this rank started '
                         'training; not training without it')
    _die_with_parent(launcher, signal.SIGTERM)


def init_process_group(backend: str, timeout: Optional[timedelta] = None) -> None:
    """``torch.distributed.init_process_group`` from the ``env://`` variables. torch's c10d
    rendezvous gives each attempt a store of its own; its static one keeps the agents' store,
    where a restarted process would read a dead peer's address: there the keys are prefixed
    with the attempt, which each node's agent counts on its own (so across nodes that case is
    refused). Every process then takes the job's largest restart count, so that all decide
    alike whether to resume (:func:`choose_resume`).

    Raises:
        RuntimeError: restarts across nodes on the agents' shared store, naming the fix.
    """
    timeout = timeout or default_pg_timeout
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT')
    agent_store = os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True'
    if attempt is None or not agent_store:
        torch_dist.init_process_group(backend=backend, timeout=timeout)
    else:
        nodes = int(os.environ.get('GROUP_WORLD_SIZE', '1'))
        if nodes > 1 and int(os.environ.get('TORCHELASTIC_MAX_RESTARTS', '0')):
            raise RuntimeError(
                f'torchrun restarts on {nodes} nodes with the store shared by the agents: after '
                'a restart the nodes would count different attempts and wait on each other '
                'until the timeout. Start torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 '
                'and --rdzv-backend=c10d (tools/dist_train.sh does so when MAX_RESTARTS > 0).')
        rank, world_size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
        store = torch_dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']),
                                    world_size, is_master=False, timeout=timeout)
        torch_dist.init_process_group(
            backend=backend, store=torch_dist.PrefixStore(f'cvt_mm/attempt_{attempt}', store),
            rank=rank, world_size=world_size, timeout=timeout)
    if attempt is not None:
        count = torch.tensor([int(attempt)], dtype=torch.int64,
                             device='cuda' if 'nccl' in backend else 'cpu')
        torch_dist.all_reduce(count, op=torch_dist.ReduceOp.MAX)
        os.environ['TORCHELASTIC_RESTART_COUNT'] = str(int(count.item()))


def finish_distributed(wait: bool = True) -> None:
    """Wait for every process, then tear the process group down: left to interpreter
    shutdown, gloo's threads sometimes abort a finished run (exit -6). A finished runner's DDP
    wrapper holds the group from reference cycles, so they are collected first; the caller
    must hold no reference to the runner.

    Args:
        wait (bool): a barrier first. Defaults to True. False after a preemption checkpoint,
            whose hook has waited for every rank already and whose peers may be gone.
    """
    if torch_dist.is_available() and torch_dist.is_initialized():
        gc.collect()
        if wait:
            torch_dist.barrier()
        torch_dist.destroy_process_group()


def prepare_distributed(cfg, launcher: str) -> None:
    """Make ``--launcher`` work before the runner is built: slurm's environment
    (:func:`slurm_environment`); for ``pytorch`` and ``slurm`` the process group started here
    (:func:`init_process_group`; MMEngine then skips its own), so that rank 0 can share its
    choice of checkpoint; without CUDA, gloo and
    :class:`~cvt_mm.engine.cpu_ddp.CPUDistributedDataParallel`.
    """
    if launcher == 'slurm':
        os.environ.update(slurm_environment())
    if launcher == 'none':
        return
    stop_with_launcher()
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


def _count(name: str) -> int:
    value = os.environ.get(name, '')
    return int(value) if value.isdigit() else 0


def restart_count() -> int:
    """How often this job was started again after a failure: slurm's ``SLURM_RESTART_COUNT``
    plus torchrun's ``TORCHELASTIC_RESTART_COUNT`` (torchrun in a requeued job counts from 0,
    which must not hide the requeue)."""
    return _count('SLURM_RESTART_COUNT') + _count('TORCHELASTIC_RESTART_COUNT')


def find_resumable_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint ``work_dir/last_checkpoint`` names, or else the newest ``*.pth`` written
    (names do not order a run that mixes ``epoch_N.pth`` with a preemption's ``iter_N.pth``;
    the higher number first among files written at once); None when there is none. Our
    tools write checkpoints whole or not at all (``cvt_mm.setup_process``)."""
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip()
        if named and osp.isfile(named):
            return named

    def written(path):
        number = re.search(r'(\d+)\.pth$', osp.basename(path))
        return os.stat(path).st_mtime_ns, int(number.group(1)) if number else -1

    return max(glob.glob(osp.join(work_dir, '*.pth')), key=written, default=None)


def _say(message: str) -> None:
    """Print once per job (rank 0), before MMEngine's logger exists."""
    if os.environ.get('RANK', '0') == '0':
        print(message, flush=True)


def _choose_checkpoint(cfg, resume) -> tuple:
    """(path or None, the checkpoint's seed or None); see :func:`choose_resume`."""
    restarted = restart_count() > 0
    path = None
    if resume == 'auto' or restarted:
        path = find_resumable_checkpoint(cfg.work_dir)
        if path is None and resume not in (None, 'auto'):
            path = resume  # restarted before the first checkpoint: the file asked for
    elif resume is not None:
        path = resume
    checkpoint = read_checkpoint(path) if path else {}  # a clear error for a damaged file
    missing = [key for key in ('state_dict', 'optimizer', 'meta') if path and key not in checkpoint]
    if missing:
        raise ValueError(f'--resume: {path} is not a training checkpoint (no '
                         f'{", ".join(missing)}); name one with --resume PATH')
    meta = checkpoint.get('meta', {})
    if restarted:
        requeues, restarts = _count('SLURM_RESTART_COUNT'), _count('TORCHELASTIC_RESTART_COUNT')
        sources = [f'slurm requeue {requeues}, after a preemption, a time limit or a failure'
                   ] if requeues else []
        if restarts:
            sources.append(f'torchrun restart {restarts} of '
                           f'{os.environ.get("TORCHELASTIC_MAX_RESTARTS")}, after a process of '
                           'the job failed')
        _say(' and '.join(sources) + ': ' + (
            f'resuming from {path} (iteration {meta.get("iter", 0)}, epoch '
            f'{meta.get("epoch", 0)})' if path else
            f'no checkpoint in {cfg.work_dir}: training starts again at iteration 1'))
    elif path:
        _say(f'--resume: resuming from {path}')
    elif resume == 'auto':
        _say(f'--resume: no checkpoint to resume from in {cfg.work_dir}; training starts at '
             'the beginning')
    return path, meta.get('seed')


def choose_resume(cfg, resume) -> None:
    """Decide what the run continues from, in place (``cfg.resume``, ``cfg.load_from``, a
    seed the config leaves open), and say it: with ``resume='auto'`` or after a restart or
    requeue (:func:`restart_count`), the work dir's newest checkpoint; else the one ``resume``
    names. Rank 0 alone chooses, every rank takes its choice or its error: ranks looking on
    their own could see different files (a save landing in between).

    Args:
        cfg (Config): the run's config.
        resume (str | None): ``'auto'``, a checkpoint path, or None (no ``--resume``).
    """
    shared = torch_dist.is_available() and torch_dist.is_initialized() and \
        torch_dist.get_world_size() > 1
    choice = [None, None, None]  # path, seed, error
    if not shared or torch_dist.get_rank() == 0:
        try:
            choice[:2] = _choose_checkpoint(cfg, resume)
        except Exception as err:  # noqa: BLE001 - every rank raises it, below
            if not shared:
                raise
            choice[2] = err
    if shared:
        torch_dist.broadcast_object_list(choice, src=0, group=flag_group())
    path, seed, error = choice
    if error is not None:
        raise error
    cfg.resume = path is not None
    if path is None:
        if resume == 'auto':
            cfg.load_from = None
        return
    cfg.load_from = path
    randomness = cfg.get('randomness') or ConfigDict()
    if randomness.get('seed') is None and seed is not None:
        randomness['seed'] = seed
        cfg.randomness = randomness


def build_runner(cfg):
    """``RUNNERS.build(cfg)`` when the config names a ``runner_type`` (as MMDetection's tools),
    otherwise :class:`~cvt_mm.engine.runner.ExactResumeRunner`; the log says whether this
    process's malloc reuses large freed blocks (tools/misc/cpu_malloc.sh)."""
    from mmengine.registry import RUNNERS

    from ..engine.runner import ExactResumeRunner
    runner = RUNNERS.build(cfg) if 'runner_type' in cfg else ExactResumeRunner.from_cfg(cfg)
    runner.logger.info('CPU allocator: ' + (
        'large freed blocks reused (MALLOC_MMAP_MAX_=0: tools/misc/cpu_malloc.sh)'
        if os.environ.get('MALLOC_MMAP_MAX_') == '0' else
        "glibc's default (on a CPU, `bash tools/misc/cpu_malloc.sh python tools/train.py ...` "
        'and the launchers reuse large freed blocks: docs/benchmarks.md, "CPU allocator")'))
    return runner


def setup_launch(cfg, config_path: str, train: bool, resume: Optional[str] = None) -> None:
    """Everything between the config and the runner: the data on disk, ``--launcher``
    (:func:`prepare_distributed`) and, for training, the checkpoint (:func:`choose_resume`).

    Args:
        cfg (Config): from :func:`config_from_args`; changed in place.
        config_path (str): the config file, for messages.
        train (bool): a training run, else a test run.
        resume (str, optional): ``--resume`` (``'auto'`` without a file). Default None.
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
    end the process group; after a preemption without waiting for peers that may be gone,
    raising ``TrainingPreempted`` again (exit code 75). A SIGTERM/SIGUSR1 after a finished
    training lets the process finish (:class:`~cvt_mm.engine.hooks.StopsOutsideTheRun`)."""
    StopsOutsideTheRun()
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
