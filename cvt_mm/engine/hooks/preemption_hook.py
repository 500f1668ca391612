"""Stopping cleanly when the scheduler says so (:class:`PreemptionHook`).

* :class:`PreemptionHook`: on SIGTERM (slurm preemption, ``scancel``, Kubernetes eviction,
  torchrun shutting its workers down) or SIGUSR1 (``sbatch --signal=USR1@90``), every rank
  stops at the next iteration boundary together (with gradient accumulation, at the next
  optimizer step), one checkpoint of that iteration is written
  (atomically, with every rank's random states), and the processes exit with
  :data:`PREEMPTED_EXIT_CODE`. ``--resume``, a torchrun restart or a slurm requeue continue
  from it, mid-epoch. When the ranks cannot agree (another rank has died: torchrun then sends
  SIGTERM to the survivors), no checkpoint is written and the process exits with
  :data:`STOPPED_EXIT_CODE` within ``agree_timeout`` seconds; a restart resumes from the last
  complete checkpoint.

Example (a config not built on ours; configs/_base_/training_guards.py lists these and
``FiniteLossHook`` for ours)::

    custom_hooks = [dict(type='ExactResumeHook'), dict(type='PreemptionHook'),
                    dict(type='HeartbeatHook')]
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Optional, Sequence

import torch
import torch.distributed as torch_dist
from mmengine.dist import get_dist_info
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.optim import BaseOptimWrapper
from mmengine.registry import HOOKS

from ..exact_resume import ExactResumeHook
from ..flags import flag_group, timed

__all__ = ['PREEMPTED_EXIT_CODE', 'STOPPED_EXIT_CODE', 'TrainingPreempted', 'PreemptionHook']

# The message hub's record of the mid-epoch checkpoints of an epoch-based run (see _save).
_MID_EPOCH_CHECKPOINTS = 'preemption_mid_epoch_checkpoints'

#: Exit code after a preemption checkpoint was written (``EX_TEMPFAIL``: try again later).
PREEMPTED_EXIT_CODE = 75

#: Exit code when a stop signal came but the ranks could not agree on a checkpoint
#: (128 + SIGTERM, what a shell reports for a process ended by SIGTERM).
STOPPED_EXIT_CODE = 143


class TrainingPreempted(SystemExit):
    """Raised on every rank after the preemption checkpoint is written; exits the process
    with :data:`PREEMPTED_EXIT_CODE` unless caught (tools/train.py catches it to tear the
    process group down, then raises it again).

    Attributes:
        checkpoint (str): the checkpoint written.
        signal_name (str): the signal that asked for the stop.
    """

    def __init__(self, checkpoint: str, signal_name: str):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.checkpoint, self.signal_name = checkpoint, signal_name


def _find_checkpoint_hook(runner) -> Optional[CheckpointHook]:
    return next((h for h in runner.hooks if isinstance(h, CheckpointHook)), None)


def _optimizer_stepped(runner) -> bool:
    """Whether the iteration that just ended stepped the optimizer (with gradient
    accumulation, ``accumulative_counts > 1``, only every n-th iteration does)."""
    wrapper = getattr(runner, 'optim_wrapper', None)
    wrappers = wrapper.values() if hasattr(wrapper, 'optim_wrappers') else [wrapper]
    return all(w.should_update() for w in wrappers if hasattr(w, 'should_update'))


@HOOKS.register_module()
class PreemptionHook(Hook):
    """Turn SIGTERM/SIGUSR1 into a checkpoint at the next iteration boundary and an exit with
    :data:`PREEMPTED_EXIT_CODE`.

    The signal handler only records the signal. At the end of every training iteration the
    ranks combine their records (one all-reduce of a flag, on the gloo group of
    :func:`flag_group`), so all stop at the same iteration, after the iteration-based
    learning-rate step, as if a ``CheckpointHook`` saved there. With gradient accumulation
    (``optim_wrapper.accumulative_counts`` n > 1) the stop waits for the iteration whose
    optimizer step uses the accumulated gradient, at most n - 1 iterations more. The
    checkpoint is written through the ``CheckpointHook``'s saving path (its file names,
    ``max_keep_ckpts`` and ``last_checkpoint``; mid-epoch in an epoch-based run, ``iter_N.pth``).
    Further signals during the save are noted and ignored; the file appears complete or not at
    all (atomic rename), also if the process is killed.

    Args:
        signals (Sequence[str]): signals that ask for the stop.
            Defaults to ``('SIGTERM', 'SIGUSR1')``.
        agree_timeout (float): seconds to wait for the other ranks at the boundary and for
            their random states; past it (or when a collective fails) the process exits with
            :data:`STOPPED_EXIT_CODE` and writes nothing. Keep it below the time the
            scheduler gives before SIGKILL. Defaults to 30.
        save_timeout (float): seconds the other ranks wait for rank 0 to write the file.
            Defaults to 600.
    """
    # After ParamSchedulerHook (LOW, 70): the checkpoint holds the stepped schedulers, as a
    # CheckpointHook's would; before ExactResumeHook (80) and CheckpointHook (90).
    priority = 75

    def __init__(self, signals: Sequence[str] = ('SIGTERM', 'SIGUSR1'),
                 agree_timeout: float = 30, save_timeout: float = 600):
        for name in signals:
            if not isinstance(getattr(signal, str(name), None), signal.Signals):
                raise ValueError(f'PreemptionHook: unknown signal {name!r}; use names such as '
                                 "'SIGTERM', 'SIGUSR1', 'SIGUSR2'")
        self.signals = tuple(signals)
        self.agree_timeout, self.save_timeout = agree_timeout, save_timeout
        self.requested: Optional[str] = None
        self._stopping = False  # agreed by every rank; waits for an optimizer step
        self._announced = False
        self._saving = False
        self._previous: dict = {}

    # ------------------------------------------------------------------------- signals
    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is None:
            self.requested = name
        elif self._saving:
            # Nothing to do but finish: the file is renamed into place only when complete.
            sys.stderr.write(f'[cvt_mm] {name} during the preemption checkpoint: ignored, '
                             'the save continues\n')

    def before_run(self, runner) -> None:
        # Before the checkpoint is loaded and the data workers start: a signal from then on
        # is answered at the first iteration boundary. Only when training (``Runner.train``
        # has built the optimizer wrapper by now): in a test run, where the config lists
        # this hook too, nothing would answer, and SIGTERM must stop the process as usual.
        if not isinstance(runner.optim_wrapper, BaseOptimWrapper):
            return
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be installed from the main thread
        for name in self.signals:
            signum = getattr(signal, name)
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def before_train(self, runner) -> None:
        if get_dist_info()[1] > 1:
            flag_group()  # created by every rank here, never inside a timed wait

    def after_run(self, runner) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    # ------------------------------------------------------------------------ boundary
    def _agree(self) -> Optional[bool]:
        """Whether any rank has a stop request; None when the ranks cannot agree."""
        # Read once: a signal arriving between two reads would make this rank decide
        # otherwise than the flag it sent, and stop alone.
        requested = self.requested
        _, world_size = get_dist_info()
        if world_size == 1:
            return requested is not None
        flag = torch.tensor([0 if requested is None else 1], dtype=torch.int32)
        group = flag_group()

        def reduce():
            torch_dist.all_reduce(flag, op=torch_dist.ReduceOp.MAX, group=group)

        if requested is None:
            reduce()
            return bool(flag.item())
        # This rank will stop: never block on a peer that may be gone.
        if not timed(reduce, self.agree_timeout):
            return None
        return True

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if not self._stopping:
            agreed = self._agree()
            if agreed is None:
                self._give_up(runner, 'the other processes did not answer (one has probably '
                              'died)')
            self._stopping = bool(agreed)
        if not self._stopping:
            return
        # Mid-accumulation the gradient of the iterations since the last step is in no
        # checkpoint: every rank goes on to the step (they count iterations alike).
        if _optimizer_stepped(runner):
            self._stop(runner, batch_idx)
        elif not self._announced:
            self._announced = True
            print_log(f'{self.requested or "a stop request of another process"}: stopping at '
                      'the next optimizer step (gradient accumulation)', logger='current')

    # ------------------------------------------------------------------------- saving
    @staticmethod
    def _checkpoint_hook(runner) -> CheckpointHook:
        hook = _find_checkpoint_hook(runner)
        if hook is None:  # a runner built without MMEngine's default hooks
            hook = CheckpointHook(interval=-1, by_epoch=False)
            hook.before_train(runner)
        return hook

    def _save(self, runner) -> str:
        """Save on every rank (rank 0 writes) through the ``CheckpointHook``'s own saving
        path: its folder, file name template, storage backend, ``max_keep_ckpts``,
        ``last_checkpoint`` and the message hub's ``last_ckpt``, always with optimizer and
        schedulers (the checkpoint is there to be resumed from).

        An epoch-based hook cannot name a checkpoint taken mid-epoch: it is then written as
        ``iter_N.pth`` outside the hook's count, and removed once the hook has saved a newer
        one, when the hook keeps a bounded number (``max_keep_ckpts > 0``).

        Returns:
            str: the checkpoint's path.
        """
        hook, step = self._checkpoint_hook(runner), runner.iter + 1
        # The process exits after this save: the hook's settings need no restoring.
        hook.save_optimizer = hook.save_param_scheduler = True
        if hook.by_epoch:
            hook.by_epoch, hook.filename_tmpl, hook.max_keep_ckpts = False, 'iter_{}.pth', -1
            path = hook.file_backend.join_path(hook.out_dir, hook.filename_tmpl.format(step))
            # Recorded before the save, so that the resumed run finds it in the checkpoint.
            runner.message_hub.update_info(
                _MID_EPOCH_CHECKPOINTS,
                list(runner.message_hub.get_info(_MID_EPOCH_CHECKPOINTS) or []) + [path])
        hook._save_checkpoint_with_step(runner, step, dict(epoch=runner.epoch, iter=step))
        return hook.last_ckpt

    def _remove_replaced_mid_epoch_checkpoints(self, runner) -> None:
        recorded = runner.message_hub.get_info(_MID_EPOCH_CHECKPOINTS) or []
        hook = _find_checkpoint_hook(runner)
        if (not recorded or hook is None or hook.max_keep_ckpts <= 0
                or runner.message_hub.get_info('last_ckpt') in recorded):
            return  # kept: every checkpoint is, or none newer has been saved yet
        if get_dist_info()[0] == 0:
            for path in recorded:
                if hook.file_backend.isfile(path):
                    hook.file_backend.remove(path)
        runner.message_hub.update_info(_MID_EPOCH_CHECKPOINTS, [])

    def before_train_epoch(self, runner) -> None:
        self._remove_replaced_mid_epoch_checkpoints(runner)

    def after_train(self, runner) -> None:
        self._remove_replaced_mid_epoch_checkpoints(runner)

    def _give_up(self, runner, why: str) -> None:
        rank = get_dist_info()[0]
        print_log(f'[rank {rank}] {self.requested}: {why}; exiting without a checkpoint '
                  f'(code {STOPPED_EXIT_CODE}). A restart resumes from the last complete '
                  f'checkpoint in {runner.work_dir}.', logger='current', level=40)
        sys.stdout.flush()
        sys.stderr.flush()
        # A collective may still be blocked in its thread; nothing can be cleaned up.
        os._exit(STOPPED_EXIT_CODE)

    def _stop(self, runner, batch_idx: int) -> None:
        rank, world_size = get_dist_info()
        self._saving = True
        signal_name = self.requested or 'a stop request of another process'
        exact = next((h for h in runner.hooks if isinstance(h, ExactResumeHook)), None)
        if exact is not None:
            if not timed(lambda: exact.collect(runner, epoch=runner.epoch, batch=batch_idx + 1),
                          self.agree_timeout):
                self._give_up(runner, 'the random states of every process could not be '
                              'gathered')
        if rank == 0:
            print_log(f'{signal_name}: stopping after iteration {runner.iter + 1} on every '
                      'process; saving a checkpoint', logger='current')
        started = time.time()
        path = self._save(runner)
        if rank == 0:
            print_log(f'Preemption checkpoint {path} written in {time.time() - started:.1f} s; '
                      f'exit code {PREEMPTED_EXIT_CODE}. Continue with tools/train.py CONFIG '
                      '--resume (restarts and requeues resume by themselves).',
                      logger='current')
        if world_size > 1:
            # The others wait for the file, so the launcher does not tear rank 0 down mid-save.
            group = flag_group()
            if not timed(lambda: torch_dist.barrier(group=group), self.save_timeout):
                self._give_up(runner, 'rank 0 did not finish the checkpoint')
        # Every rank's part is saved and each exits with PREEMPTED_EXIT_CODE. Launchers end
        # the other tasks when the first one exits (srun --kill-on-bad-exit, torchrun): their
        # SIGTERM must not turn that exit code into a death by signal, which a batch script
        # reads as a failure and does not requeue.
        for signum in self._previous:
            signal.signal(signum, signal.SIG_IGN)
        self._previous.clear()
        raise TrainingPreempted(path, signal_name)
