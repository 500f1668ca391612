"""Hooks imported by the training processes of the cluster and resume tests
(``custom_imports``; helpers.narrow_config): a pause at the start of every training
iteration and of every checkpoint save, and a record of the iterations completed.

The tests kill or signal a rank as soon as a checkpoint appears and expect the next
iteration to be running when the signal lands, or send a second signal while the
preemption checkpoint is written. With models small enough for the suite, an iteration or a
save alone is too short for that on a loaded or fast machine.

The runs also record the iterations each of their processes completed
(``IterationRecordHook``), so that a test counts what a resumed run did instead of reading
its log."""
import os
import os.path as osp
import time

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class PaceHook(Hook):
    """Sleep ``seconds`` before each training iteration and before each checkpoint is
    written.

    Args:
        seconds (float): the pause. Defaults to 0.5.
        first_run_seconds (float, optional): the pause of a slurm job's first run instead
            (``SLURM_RESTART_COUNT`` unset or 0), so that a real time limit falls within it
            and the requeued run ends before its own. Defaults to None (``seconds``).
    """

    def __init__(self, seconds: float = 0.5, first_run_seconds: float = None):
        self.seconds = seconds
        if first_run_seconds is not None and int(os.environ.get('SLURM_RESTART_COUNT', 0)) == 0:
            self.seconds = first_run_seconds

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        time.sleep(self.seconds)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        time.sleep(self.seconds)


RECORD = 'executed_iterations.rank{rank}.txt'


@HOOKS.register_module()
class IterationRecordHook(Hook):
    """Append ``PID ITERATION`` to ``WORK_DIR/executed_iterations.rankR.txt`` after each
    training iteration a process completes (iterations counted from 1), so that every run,
    restart or requeue of a work dir leaves its own lines (helpers.executed_iterations)."""

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        path = osp.join(runner.work_dir, RECORD.format(rank=runner.rank))
        with open(path, 'a') as f:
            f.write(f'{os.getpid()} {runner.iter + 1}\n')


# A pause inside every atomic write of a training process, between the temporary file's data
# and its rename, when CVT_MM_TEST_WRITE_PAUSE says how long (tests/soak.py): the soak's kill
# while a checkpoint is written lands while the temporary file exists, however fast the disk.
_WRITE_PAUSE = float(os.environ.get('CVT_MM_TEST_WRITE_PAUSE') or 0)
if _WRITE_PAUSE:
    import types

    from cvt_mm.checkpoint import io as _checkpoint_io

    def _slow_fsync(fd: int) -> None:
        time.sleep(_WRITE_PAUSE)
        os.fsync(fd)

    _checkpoint_io.os = types.SimpleNamespace(
        **{name: getattr(os, name) for name in dir(os)
           if not name.startswith('__') and name != 'fsync'},
        fsync=_slow_fsync)
