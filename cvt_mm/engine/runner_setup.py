"""What ``tools/train.py`` adds to a training config (resumable loops, the training hooks,
guarded data workers) and how it builds the runner."""
from mmengine.logging import print_log

from .allocator import reuse_freed_memory
from .workers import guard_dataloader_workers

__all__ = ['RESUMABLE_LOOPS', 'TRAINING_HOOKS', 'prepare_training', 'build_runner']

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
