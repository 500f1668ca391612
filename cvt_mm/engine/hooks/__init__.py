"""The hooks of :mod:`cvt_mm.engine`, one per module (as MMEngine's ``mmengine.hooks``), except
``ExactResumeHook``, which lives with the states it saves (:mod:`cvt_mm.engine.exact_resume`).
:class:`~cvt_mm.engine.runner.ExactResumeRunner` adds :data:`~cvt_mm.engine.runner.TRAINING_HOOKS`
to every run;
:class:`ClassesCheckHook` is opt-in."""
from ..exact_resume import ExactResumeHook
from .classes_check_hook import ClassesCheckHook
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
