"""A checkpoint at the next iteration boundary and exit code 75 on SIGTERM/SIGUSR1
(:class:`PreemptionHook`; docs/cluster.md, "Preemption and time limits").

Example (a config not built on ours; configs/_base_/training_guards.py lists it for ours)::

    custom_hooks = [dict(type='ExactResumeHook'), dict(type='PreemptionHook')]
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Optional, Sequence

import torch
import torch.distributed as torch_dist
from mmengine.dist import get_dist_info
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.optim import BaseOptimWrapper
from mmengine.registry import HOOKS

from ..exact_resume import ExactResumeHook
from ..flags import flag_group
from ..workers import end_workers

__all__ = ['PREEMPTED_EXIT_CODE', 'STOPPED_EXIT_CODE', 'TrainingPreempted', 'PreemptionHook',
           'StopsOutsideTheRun']

# The message hub's record of the mid-epoch checkpoints of an epoch-based run (see _save).
_MID_EPOCH_CHECKPOINTS = 'preemption_mid_epoch_checkpoints'

#: Exit code after a preemption checkpoint was written (``EX_TEMPFAIL``: try again later).
PREEMPTED_EXIT_CODE = 75

#: Exit code when the ranks could not agree on a checkpoint (128 + SIGTERM, as a shell reports
#: a process ended by SIGTERM).
STOPPED_EXIT_CODE = 143


class TrainingPreempted(SystemExit):
    """Raised on every rank once the preemption checkpoint is written: exit code
    :data:`PREEMPTED_EXIT_CODE` (tools/train.py ends the process group first).

    Attributes:
        checkpoint (str): the checkpoint written.
        signal_name (str): the signal that asked for the stop.
    """

    def __init__(self, checkpoint: str, signal_name: str):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.checkpoint, self.signal_name = checkpoint, signal_name


class StopsOutsideTheRun:
    """The stop signals' handler of a process that runs one training or test and exits
    (``tools/train.py``, ``tools/test.py``: :func:`~cvt_mm.apis.launch.run_and_finish`),
    installed before the runner is built. :class:`PreemptionHook` answers the signals during
    a training run and gives them back after it (a test run never takes them). Before the run
    a stop does what the handler before this one did (by default it ends the process). Once a
    training run has ended, its last checkpoint written, a stop has nothing left to save and the
    process finishes (exit code 0), where by default it would die. Slurm's time-limit warning
    (``--signal=USR1@N``) comes in those seconds whenever a job ends within N s of its limit,
    and a death by the signal makes a finished job FAILED, which ``--dependency=afterok`` jobs
    wait on for ever.

    Args:
        signals (Sequence[str]): the signals. Defaults to ``('SIGTERM', 'SIGUSR1')``.

    Example::

        StopsOutsideTheRun()  # then build the runner and train
    """

    def __init__(self, signals: Sequence[str] = ('SIGTERM', 'SIGUSR1')):
        self.run_ended = False
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for name in signals:
                signum = getattr(signal, name)
                self._previous[signum] = signal.signal(signum, self)

    def __call__(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.run_ended:
            sys.stderr.write(f'[cvt_mm] {name} after training ended: nothing left to '
                             'checkpoint; the process finishes\n')
            return
        previous = self._previous[signum]
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # the default: end the process by this signal
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


def _find_checkpoint_hook(runner) -> Optional[CheckpointHook]:
    return next((h for h in runner.hooks if isinstance(h, CheckpointHook)), None)


def _optimizer_stepped(runner) -> bool:
    """Whether the iteration that just ended stepped the optimizer (with gradient
    accumulation only every n-th does)."""
    wrapper = getattr(runner, 'optim_wrapper', None)
    wrappers = wrapper.values() if hasattr(wrapper, 'optim_wrappers') else [wrapper]
    return all(w.should_update() for w in wrappers if hasattr(w, 'should_update'))


@HOOKS.register_module()
class PreemptionHook(Hook):
    """Turn SIGTERM/SIGUSR1 into a checkpoint at the next iteration boundary (with gradient
    accumulation, the next optimizer step), agreed by every rank through an all-reduce of a
    flag after each iteration, written through the ``CheckpointHook``'s saving path, then an
    exit with :data:`PREEMPTED_EXIT_CODE`.

    Args:
        signals (Sequence[str]): signals that ask for the stop.
            Defaults to ``('SIGTERM', 'SIGUSR1')``.
        agree_timeout (float): seconds a rank that has a stop request waits for the others;
            past it, or when a collective fails (a peer died), the process writes nothing and
            exits with :data:`STOPPED_EXIT_CODE`. Keep it below the scheduler's grace time.
            Defaults to 30.
        save_timeout (float): seconds the other ranks wait for rank 0 to write the file.
            Defaults to 600.
    """
    # After ParamSchedulerHook (LOW, 70), as a CheckpointHook's save; before ExactResumeHook
    # (80) and CheckpointHook (90).
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

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is None:
            self.requested = name
        elif self._saving:  # the file is renamed into place only when complete
            sys.stderr.write(f'[cvt_mm] {name} during the preemption checkpoint: ignored, '
                             'the save continues\n')

    def before_run(self, runner) -> None:
        # Training only (Runner.train has built the optimizer wrapper by now): in a test run
        # nothing would answer a recorded signal, and SIGTERM must stop the process as usual.
        if not isinstance(runner.optim_wrapper, BaseOptimWrapper) or \
                threading.current_thread() is not threading.main_thread():
            return
        for name in self.signals:
            signum = getattr(signal, name)
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def after_run(self, runner) -> None:
        for signum, handler in self._previous.items():
            if isinstance(handler, StopsOutsideTheRun):
                handler.run_ended = True  # before it is back: no stop finds it unaware
            signal.signal(signum, handler)
        self._previous.clear()

    def _agree(self) -> Optional[bool]:
        """Whether any rank has a stop request; None when the ranks cannot agree."""
        # Read once: a signal between two reads would make this rank decide otherwise than
        # the flag it sent, and stop alone.
        requested = self.requested
        if get_dist_info()[1] == 1:
            return requested is not None
        flag = torch.tensor([int(requested is not None)], dtype=torch.int32)
        work = torch_dist.all_reduce(flag, op=torch_dist.ReduceOp.MAX, group=flag_group(),
                                     async_op=True)
        if requested is None:
            work.wait()
            return bool(flag.item())
        try:  # this rank will stop: it never blocks on a peer that may be gone
            work.wait(timeout=timedelta(seconds=self.agree_timeout))
        except RuntimeError:
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
        # Mid-accumulation the gradient since the last step is in no checkpoint: every rank
        # goes on to the step (they count iterations alike).
        if _optimizer_stepped(runner):
            self._stop(runner, batch_idx)
        elif not self._announced:
            self._announced = True
            print_log(f'{self.requested or "a stop request of another process"}: stopping at '
                      'the next optimizer step (gradient accumulation)', logger='current')

    def _save(self, runner) -> str:
        """Save through the ``CheckpointHook``'s path (names, ``max_keep_ckpts``,
        ``last_checkpoint``) with optimizer and schedulers; mid-epoch in an epoch-based run as
        ``iter_N.pth``, removed once a newer one is saved (``max_keep_ckpts > 0``)."""
        hook, step = _find_checkpoint_hook(runner), runner.iter + 1
        if hook is None:  # a runner built without MMEngine's default hooks
            hook = CheckpointHook(interval=-1, by_epoch=False)
            hook.before_train(runner)
        # The process exits after this save: the hook's settings need no restoring.
        hook.save_optimizer = hook.save_param_scheduler = True
        if hook.by_epoch:
            hook.by_epoch, hook.filename_tmpl, hook.max_keep_ckpts = False, 'iter_{}.pth', -1
            path = hook.file_backend.join_path(hook.out_dir, hook.filename_tmpl.format(step))
            # Recorded before the save, so that the resumed run finds it in the checkpoint.
            hub = runner.message_hub
            hub.update_info(_MID_EPOCH_CHECKPOINTS,
                            list(hub.get_info(_MID_EPOCH_CHECKPOINTS) or []) + [path])
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
        print_log(f'[rank {get_dist_info()[0]}] {self.requested}: {why}; exiting without a '
                  f'checkpoint (code {STOPPED_EXIT_CODE}). A restart resumes from the last '
                  f'complete checkpoint in {runner.work_dir}.', logger='current', level=40)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(STOPPED_EXIT_CODE)  # a collective may still be pending: nothing to clean up

    def _stop(self, runner, batch_idx: int) -> None:
        rank, world_size = get_dist_info()
        self._saving = True
        signal_name = self.requested or 'a stop request of another process'
        exact = next((h for h in runner.hooks if isinstance(h, ExactResumeHook)), None)
        try:
            if exact is not None:
                exact.collect(runner, epoch=runner.epoch, batch=batch_idx + 1)
        except RuntimeError:  # gloo: a peer's connection is gone
            self._give_up(runner, 'the random states of every process could not be gathered')
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
            try:
                torch_dist.monitored_barrier(group=flag_group(),
                                             timeout=timedelta(seconds=self.save_timeout))
            except RuntimeError:
                self._give_up(runner, 'rank 0 did not finish the checkpoint')
        # Launchers end the other tasks when the first exits (srun --kill-on-bad-exit,
        # torchrun): their SIGTERM must not turn exit code 75 into a death by signal, which a
        # batch script reads as a failure and does not requeue.
        for signum in self._previous:
            signal.signal(signum, signal.SIG_IGN)
        self._previous.clear()
        end_workers(runner.train_dataloader)
        raise TrainingPreempted(path, signal_name)
