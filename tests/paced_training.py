"""A hook that adds a pause to the start of every training iteration and to every
checkpoint save, imported by the training processes of the cluster and resume tests
(``custom_imports``; helpers.narrow_config).

The tests kill or signal a rank as soon as a checkpoint appears and expect the next
iteration to be running when the signal lands, or send a second signal while the
preemption checkpoint is written. With models small enough for the suite, an iteration or a
save alone is too short for that on a loaded or fast machine."""
import time

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class PaceHook(Hook):
    """Sleep ``seconds`` before each training iteration and before each checkpoint is
    written.

    Args:
        seconds (float): the pause. Defaults to 0.5.
    """

    def __init__(self, seconds: float = 0.5):
        self.seconds = seconds

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        time.sleep(self.seconds)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        time.sleep(self.seconds)
