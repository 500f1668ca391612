"""How ``tools/train.py`` and ``tools/test.py`` build the runner: the one a config names by
``runner_type`` (ours: :class:`~cvt_mm.engine.runner.ExactResumeRunner`), in a process whose
malloc reuses large freed blocks."""
__all__ = ['build_runner']


def build_runner(cfg):
    """``RUNNERS.build(cfg)`` when the config names a ``runner_type`` (as MMDetection's tools),
    otherwise :class:`~cvt_mm.engine.runner.ExactResumeRunner` (a config that is not built on
    ours), in a process whose malloc reuses large freed blocks
    (:func:`~cvt_mm.engine.allocator.reuse_freed_memory`, logged; ``CVT_MM_MALLOC=system``
    opts out)."""
    from mmengine.registry import RUNNERS

    from .allocator import reuse_freed_memory
    from .runner import ExactResumeRunner
    allocator = reuse_freed_memory()  # before the data workers fork and tensors grow
    runner = RUNNERS.build(cfg) if 'runner_type' in cfg else ExactResumeRunner.from_cfg(cfg)
    runner.logger.info(f'CPU allocator: {allocator}')
    return runner
