"""The engine's hooks, one per module (``ExactResumeHook`` lives with the states it saves, in
:mod:`cvt_mm.engine.exact_resume`). :class:`ClassesCheckHook` is opt-in."""
from ..exact_resume import ExactResumeHook
from .classes_check_hook import ClassesCheckHook
from .finite_loss_hook import FiniteLossHook
from .preemption_hook import (
    PREEMPTED_EXIT_CODE,
    STOPPED_EXIT_CODE,
    PreemptionHook,
    StopsOutsideTheRun,
    TrainingPreempted,
)

__all__ = ['ClassesCheckHook', 'ExactResumeHook', 'FiniteLossHook', 'PreemptionHook',
           'StopsOutsideTheRun', 'TrainingPreempted', 'PREEMPTED_EXIT_CODE', 'STOPPED_EXIT_CODE']
