"""The hooks of :mod:`cvt_mm.engine`, one per module (as MMEngine's ``mmengine.hooks``).
:class:`~cvt_mm.engine.runner.ExactResumeRunner` adds :data:`~cvt_mm.engine.runner.TRAINING_HOOKS`
to every run;
:class:`ClassesCheckHook` is opt-in."""
from .classes_check_hook import ClassesCheckHook
from .exact_resume_hook import ExactResumeHook
from .finite_loss_hook import FiniteLossHook
from .heartbeat_hook import HeartbeatHook
from .preemption_hook import (
    PREEMPTED_EXIT_CODE,
    STOPPED_EXIT_CODE,
    PreemptionHook,
    TrainingPreempted,
)

__all__ = ['ClassesCheckHook', 'ExactResumeHook', 'FiniteLossHook', 'HeartbeatHook',
           'PreemptionHook', 'TrainingPreempted', 'PREEMPTED_EXIT_CODE', 'STOPPED_EXIT_CODE']
