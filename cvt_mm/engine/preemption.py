"""Stopping cleanly when the scheduler says so, and leaving a trace for restarts.

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
* :class:`HeartbeatHook`: rank 0 records how far training got in ``WORK_DIR/heartbeat.json``,
  so that a restart can say how much work the failure cost.

Example (a config used with another launcher than ``tools/train.py``)::

    custom_hooks = [dict(type='ExactResumeHook'), dict(type='PreemptionHook'),
                    dict(type='HeartbeatHook')]
"""
from __future__ import annotations

import json
import os
import os.path as osp
import signal
import sys
import threading
import time
import weakref
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as torch_dist
from mmengine.dist import get_dist_info
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS

from ..checkpoint.io import write_atomically
from .random_state import ExactResumeHook

__all__ = ['PREEMPTED_EXIT_CODE', 'STOPPED_EXIT_CODE', 'TrainingPreempted', 'PreemptionHook',
           'HeartbeatHook', 'HEARTBEAT_FILE', 'read_heartbeat', 'flag_group']

#: Exit code after a preemption checkpoint was written (``EX_TEMPFAIL``: try again later).
PREEMPTED_EXIT_CODE = 75
#: Exit code when a stop signal came but the ranks could not agree on a checkpoint
#: (128 + SIGTERM, what a shell reports for a process ended by SIGTERM).
STOPPED_EXIT_CODE = 143
HEARTBEAT_FILE = 'heartbeat.json'


class TrainingPreempted(SystemExit):
    """Raised on every rank after the preemption checkpoint is written; exits the process
    with :data:`PREEMPTED_EXIT_CODE` unless caught.

    Attributes:
        checkpoint (str): the checkpoint written.
        signal_name (str): the signal that asked for the stop.
    """

    def __init__(self, checkpoint: str, signal_name: str):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.checkpoint, self.signal_name = checkpoint, signal_name


# Default process group -> the gloo group the per-iteration flags travel on beside it (None:
# the default group itself). Weak keys: a group kept alive here after destroy_process_group
# keeps gloo's threads running into interpreter shutdown, which sometimes aborts the process
# ("terminate called without an active exception") after a run that finished.
_flag_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def flag_group():
    """The process group of the small per-iteration flags (a stop request, a non-finite
    loss): None (the default group) when the default group runs gloo for CPU tensors,
    otherwise a gloo group of all ranks beside it, created once per default group.

    Under NCCL an all-reduce returns as soon as it is queued, so a wait on it with a timeout
    cannot tell a dead peer; on gloo it blocks until every rank has answered and raises when
    a peer's connection is gone. The flags live on the CPU, so no GPU synchronisation is
    added either. Every rank must make the first call at the same point (creating the group
    is a collective): the hooks make it in ``before_train``.

    Returns:
        ProcessGroup | None: the group to pass to the flag collectives.
    """
    default = torch_dist.group.WORLD
    if default not in _flag_groups:
        backend = str(torch_dist.get_backend()).lower()
        _flag_groups[default] = None if 'gloo' in backend else torch_dist.new_group(
            backend='gloo')
    return _flag_groups[default]


def _optimizer_stepped(runner) -> bool:
    """Whether the iteration that just ended stepped the optimizer (with gradient
    accumulation, ``accumulative_counts > 1``, only every n-th iteration does)."""
    wrapper = getattr(runner, 'optim_wrapper', None)
    wrappers = wrapper.values() if hasattr(wrapper, 'optim_wrappers') else [wrapper]
    return all(w.should_update() for w in wrappers if hasattr(w, 'should_update'))


def _timed(fn: Callable[[], object], timeout: float) -> bool:
    """Run a collective in a helper thread; False when it raised or did not finish within
    ``timeout`` seconds (a peer has died: gloo raises, NCCL would block)."""
    outcome = {}
    # The CUDA device is per thread: the helper must use the caller's (NCCL collectives).
    device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    def target():
        try:
            if device is not None:
                torch.cuda.set_device(device)
            fn()
            outcome['ok'] = True
        except Exception as err:  # noqa: BLE001 - reported by the caller
            outcome['error'] = err

    thread = threading.Thread(target=target, name='cvt_mm-preemption', daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(outcome.get('ok'))


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
    checkpoint is named as ``CheckpointHook`` names iteration checkpoints (``iter_N.pth``, in its
    ``out_dir``) and ``last_checkpoint`` points to it. Further signals during the save are
    noted and ignored; the file appears complete or not at all (atomic rename), also if the
    process is killed.

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
        # is answered at the first iteration boundary.
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
        if not _timed(reduce, self.agree_timeout):
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
            if not _timed(lambda: exact.collect(runner, epoch=runner.epoch, batch=batch_idx + 1),
                          self.agree_timeout):
                self._give_up(runner, 'the random states of every process could not be '
                              'gathered')
        ckpt_hook = next((h for h in runner.hooks if isinstance(h, CheckpointHook)), None)
        out_dir = getattr(ckpt_hook, 'out_dir', None) or runner.work_dir
        filename = f'iter_{runner.iter + 1}.pth'
        path = osp.join(out_dir, filename)
        if rank == 0:
            print_log(f'{signal_name}: stopping after iteration {runner.iter + 1} on every '
                      f'process; saving {path}', logger='current')
            started = time.time()
            runner.save_checkpoint(
                out_dir, filename, save_optimizer=True, save_param_scheduler=True,
                meta=dict(epoch=runner.epoch, iter=runner.iter + 1), by_epoch=False,
                backend_args=getattr(ckpt_hook, 'backend_args', None))
            write_atomically(path, osp.join(runner.work_dir, 'last_checkpoint'))
            runner.message_hub.update_info('last_ckpt', path)
            print_log(f'Preemption checkpoint written in {time.time() - started:.1f} s; exit '
                      f'code {PREEMPTED_EXIT_CODE}. Continue with tools/train.py CONFIG '
                      '--resume (restarts and requeues resume by themselves).',
                      logger='current')
        if world_size > 1:
            # The others wait for the file, so the launcher does not tear rank 0 down mid-save.
            group = flag_group()
            if not _timed(lambda: torch_dist.barrier(group=group), self.save_timeout):
                self._give_up(runner, 'rank 0 did not finish the checkpoint')
            torch_dist.destroy_process_group()
        # Every rank's part is saved and each exits with PREEMPTED_EXIT_CODE. Launchers end
        # the other tasks when the first one exits (srun --kill-on-bad-exit, torchrun): their
        # SIGTERM must not turn that exit code into a death by signal, which a batch script
        # reads as a failure and does not requeue.
        for signum in self._previous:
            signal.signal(signum, signal.SIG_IGN)
        self._previous.clear()
        raise TrainingPreempted(path, signal_name)


@HOOKS.register_module()
class HeartbeatHook(Hook):
    """Rank 0 writes ``WORK_DIR/heartbeat.json`` (iteration, epoch, wall time, seconds per
    iteration) at most every ``interval`` seconds and at every checkpoint, atomically. After
    a failure, the restart compares it with the checkpoint it resumes from to report the work
    lost (:func:`cvt_mm.engine.resume.describe_restart`).

    Args:
        interval (float): seconds between writes. Defaults to 10.
    """
    priority = 'LOWEST'

    def __init__(self, interval: float = 10.0):
        self.interval = interval
        self._last_write = 0.0
        self._start: Optional[tuple] = None

    def before_train(self, runner) -> None:
        self._start = (time.time(), runner.iter)

    def _write(self, runner, iteration: int) -> None:
        now = time.time()
        self._last_write = now
        start_time, start_iter = self._start or (now, iteration)
        done = iteration - start_iter
        record = dict(iter=iteration, epoch=runner.epoch, time=now, interval=self.interval,
                      seconds_per_iter=(now - start_time) / done if done > 0 else None)
        write_atomically(json.dumps(record), osp.join(runner.work_dir, HEARTBEAT_FILE))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if get_dist_info()[0] == 0 and time.time() - self._last_write >= self.interval:
            self._write(runner, runner.iter + 1)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        # Called on the saving rank: the record is never older than the newest checkpoint.
        self._write(runner, int(checkpoint.get('meta', {}).get('iter', runner.iter)))


def read_heartbeat(work_dir: str) -> Optional[dict]:
    """The last :class:`HeartbeatHook` record of ``work_dir``, or None."""
    path = osp.join(work_dir, HEARTBEAT_FILE)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
