"""Rank 0 records how far training got in ``WORK_DIR/heartbeat.json``
(:class:`HeartbeatHook`), so that a restart can say how much work the failure cost
(:func:`cvt_mm.engine.resume.describe_restart`).

Example::

    custom_hooks = [dict(type='HeartbeatHook', interval=10)]
"""
from __future__ import annotations

import json
import os.path as osp
import time
from typing import Optional

from mmengine.dist import get_dist_info
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from ...checkpoint.io import write_atomically
from ..resume import HEARTBEAT_FILE

__all__ = ['HeartbeatHook']


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
        # Every rank prepares the checkpoint, rank 0 writes it: the record is never older
        # than the newest checkpoint.
        if get_dist_info()[0] == 0:
            self._write(runner, int(checkpoint.get('meta', {}).get('iter', runner.iter)))
