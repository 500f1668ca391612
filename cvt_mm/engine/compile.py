"""``compile`` in a config (MMEngine's switch) for the parts of a model that compile: MMEngine
compiles the whole ``train_step``, whose optimizer step torch fails to trace under MMEngine's
``OptimWrapper`` (``'UserDefinedDictVariable' object has no attribute 'items'``), and whose
heads' Python would break the graph. :class:`~.runner.ExactResumeRunner` compiles ``targets``
in place instead (``nn.Module.compile``: keys unchanged), for training and testing::

    compile = True    # backbone and neck (where the model has one), torch's defaults
    compile = dict(backend='inductor', targets=('backbone', ))  # the rest: torch.compile's
"""
import inspect

import torch
from torch import nn

DEFAULT_TARGETS = ('backbone', 'neck')


def compile_options(cfg):
    """``dict(targets, kwargs, explicit)`` for a config's ``compile`` (``None``: none asked),
    or a ``ValueError`` naming the allowed keys for one this torch's ``torch.compile`` lacks."""
    if cfg is None or cfg is False:
        return None
    if not isinstance(cfg, (bool, dict)):
        raise ValueError(f'compile must be True, False or a dict of torch.compile options, '
                         f'got {cfg!r}')
    kwargs = {} if cfg is True else dict(cfg)
    explicit = 'targets' in kwargs
    targets = kwargs.pop('targets', DEFAULT_TARGETS)
    allowed = [p for p in inspect.signature(torch.compile).parameters if p != 'model']
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ValueError(f'compile: {", ".join(unknown)} is not an option of torch.compile in '
                         f'torch {torch.__version__}; allowed: targets, {", ".join(allowed)}')
    targets = (targets, ) if isinstance(targets, str) else tuple(targets)
    return dict(targets=targets, kwargs=kwargs, explicit=explicit)


def compile_model(model: nn.Module, cfg) -> list:
    """Compile the ``targets`` of ``model`` (unwrapped from DDP) in place; the names compiled,
    none twice. A named target the model lacks is a ``ValueError`` naming its parts.

    Example::

        >>> model = nn.Sequential()
        >>> model.backbone = nn.Linear(2, 2)
        >>> compile_model(model, dict(backend='eager'))
        ['backbone']
    """
    options = compile_options(cfg)
    model = getattr(model, 'module', model)
    compiled = []
    for name in options['targets'] if options else ():
        part = getattr(model, name, None)
        if not isinstance(part, nn.Module):
            if not options['explicit'] and name != 'backbone':
                continue  # UperNet and classifiers have no neck
            raise ValueError(f'compile: targets names {name!r}, which {type(model).__name__} '
                             'does not have; it has: '
                             + ', '.join(n for n, _ in model.named_children()))
        if getattr(part, '_compiled_call_impl', None) is None:
            part.compile(**options['kwargs'])
            compiled.append(name)
    return compiled
