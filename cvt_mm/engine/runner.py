"""The runner of cvt_mm's training configs: MMEngine's ``Runner`` that adds the training guards
(:func:`add_training_guards`) when it trains.

Our configs name it (``runner_type = 'ExactResumeRunner'``: the schedule bases under
``configs/_base_/schedules/``, the ImageNet recipe, and each config built on a whole toolbox
config), so the guards come with the config under any launcher that builds the runner by
``runner_type``: ``tools/train.py``, MMDetection's and MMSegmentation's ``tools/train.py``,
``mim train``. A config naming another ``runner_type`` gets that runner as it is.

Example (a config of one's own, on a toolbox's)::

    _base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']
    custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
    runner_type = 'ExactResumeRunner'
"""
from mmengine.logging import print_log
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .workers import guard_dataloader_workers

__all__ = ['RESUMABLE_LOOPS', 'TRAINING_HOOKS', 'add_training_guards', 'ExactResumeRunner']

# MMEngine's loops and the subclasses that resume them exactly (cvt_mm.engine.loops).
RESUMABLE_LOOPS = {'EpochBasedTrainLoop': 'ResumableEpochBasedTrainLoop',
                   'IterBasedTrainLoop': 'ResumableIterBasedTrainLoop'}

# Hooks every training run gets (a config that lists one keeps its own settings).
TRAINING_HOOKS = ('FiniteLossHook', 'ExactResumeHook', 'PreemptionHook', 'HeartbeatHook')


def _resumable_loop(loop: dict) -> dict:
    loop = dict(loop)
    loop_type = loop.get('type')
    if loop_type is None:  # MMEngine's short form: dict(by_epoch=..., max_...)
        loop_type = 'EpochBasedTrainLoop' if loop.pop('by_epoch', False) else \
            'IterBasedTrainLoop'
    if loop_type in RESUMABLE_LOOPS:
        loop_type = RESUMABLE_LOOPS[loop_type]
    elif loop_type not in RESUMABLE_LOOPS.values():
        print_log(f'train_cfg type {loop_type!r} is not one of MMEngine\'s two loops: it is '
                  'kept, and a resume continues at epoch boundaries only', logger='current',
                  level=30)
    loop['type'] = loop_type
    return loop


def add_training_guards(runner: Runner) -> None:
    """What every training run gets, added to a runner before its ``train()`` builds the loops
    (in place; a second call adds nothing):

    * MMEngine's epoch- and iteration-based loops become their resumable subclasses
      (:mod:`cvt_mm.engine.loops`: exact mid-epoch resume on a ``StatefulDataLoader``, data
      workers that die with their process); other loops are kept, with a warning;
    * the hooks :data:`TRAINING_HOOKS` that the config does not list: stop at a non-finite
      loss, save and restore every rank's random states and data position, checkpoint and
      exit on SIGTERM/SIGUSR1, record progress;
    * validation and test data workers die with their process too.

    Args:
        runner (Runner): a runner that has not trained yet.
    """
    if isinstance(runner._train_loop, dict):
        runner._train_loop = _resumable_loop(runner._train_loop)
    present = {type(hook).__name__ for hook in runner.hooks}
    added = [name for name in TRAINING_HOOKS if name not in present]
    for name in added:
        runner.register_hook(dict(type=name))
    if added:
        runner.logger.info(f'Training guards added: {", ".join(added)}')
    for loader in (runner._val_dataloader, runner._test_dataloader):
        if isinstance(loader, dict):
            guard_dataloader_workers(loader)


@RUNNERS.register_module()
class ExactResumeRunner(Runner):
    """MMEngine's ``Runner`` whose ``train()`` first adds :func:`add_training_guards`; testing
    and validation alone run as MMEngine's. Arguments as ``Runner``."""

    def train(self):
        add_training_guards(self)
        return super().train()
