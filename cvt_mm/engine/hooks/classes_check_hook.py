"""Stopping at the start when the model and the data disagree on the classes, and at the
first batch whose label maps hold a value that is no class (:class:`ClassesCheckHook`,
opt-in; the configs of docs/custom_data.md enable it)."""
from __future__ import annotations

from mmengine.hooks import Hook
from mmengine.registry import HOOKS

__all__ = ['ClassesCheckHook', 'classifying_heads', 'head_problems', 'data_problems',
           'stray_labels']


def _leaf_datasets(dataset) -> list:
    """The datasets under MMEngine's and the toolboxes' wrappers (Concat, Repeat,
    ClassBalanced, MultiImageMix...)."""
    if hasattr(dataset, 'datasets'):
        return [leaf for d in dataset.datasets for leaf in _leaf_datasets(d)]
    if hasattr(dataset, 'dataset'):
        return _leaf_datasets(dataset.dataset)
    return [dataset]


def classifying_heads(model) -> list:
    """``(name, module, num_classes)`` of every part of ``model`` whose ``num_classes`` must be
    the dataset's number of classes: not the model itself (MMSegmentation's repeats its decode
    head's), RPN heads (class-agnostic), ``num_classes=0`` (our backbones' classification stage
    off) or a ``num_classes`` that is no int (``LabelSmoothLoss``: None)."""
    heads = []
    for name, module in model.named_modules():
        num_classes = getattr(module, 'num_classes', None)
        if (not name or name.split('.')[-1] == 'rpn_head' or isinstance(num_classes, bool)
                or not isinstance(num_classes, int) or num_classes == 0):
            continue
        heads.append((name, module, num_classes))
    return heads


def _coco_categories(dataset) -> list:
    """Category names of a COCO-format annotation file, in the file's order."""
    import json

    from mmengine.fileio import get_local_path
    with get_local_path(dataset.ann_file, backend_args=getattr(dataset, 'backend_args', None)) \
            as path, open(path) as f:
        return [category['name'] for category in json.load(f)['categories']]


def _classes(dataset) -> tuple:
    classes = (dataset.metainfo or {}).get('classes') or ()
    return classes if isinstance(classes, str) else tuple(classes)


def head_problems(model, classes: tuple, split: str) -> list:
    """What to set for each head of ``model`` (nn.Module, unwrapped) whose ``num_classes`` is
    not ``len(classes)`` (tuple[str]) of the ``split`` (str, e.g. ``'train'``) dataset: a list
    of sentences such as ``'model.roi_head.mask_head.num_classes is 80 (...), but the train
    dataset has 3 classes: set model.roi_head.mask_head.num_classes=3'``."""
    problems = []
    for name, module, num_classes in classifying_heads(model):
        if num_classes == len(classes):
            continue
        # Configs give the data preprocessor at their top level (the runner hands it to the
        # model); a model.data_preprocessor entry would replace it, normalisation and all.
        key = name if name == 'data_preprocessor' else f'model.{name}'
        fix = f'set {key}.num_classes={len(classes)}'
        if split != 'train':
            # Evaluating a trained model: more often the dataset lacks the model's classes.
            fix = ('give it the classes the model was trained with '
                   f'(metainfo=dict(classes=...)), or {fix}')
        problems.append(f'{key}.num_classes is {num_classes} ({type(module).__name__}), but the '
                        f'{split} dataset has {len(classes)} classes: {fix}')
    return problems


def data_problems(dataset, split: str) -> list:
    """Where the files of ``dataset`` would give its labels other classes' names, one sentence
    each: classes that are not a COCO-format annotation file's category names in its order
    (MMDetection numbers them in the file's order), or not an MMPretrain folder dataset's
    class folders, sorted (MMPretrain checks only their count). ``dataset`` is built
    (wrappers are looked through); ``split`` (str) names it. Returns list[str]."""
    classes = _classes(dataset)
    problems = []
    for leaf in _leaf_datasets(dataset):
        # The file is read again only for classes of the user's own: a dataset type's default
        # classes (COCO's 80) are its files' categories.
        if hasattr(leaf, 'cat_ids') and getattr(leaf, 'ann_file', None) and \
                classes != tuple(type(leaf).METAINFO.get('classes', ())):
            in_file = _coco_categories(leaf)
            missing = [c for c in classes if c not in in_file]
            if missing:
                problems.append(
                    f'{", ".join(map(repr, missing))} of the {split} classes are not category '
                    f'names of {leaf.ann_file}, whose categories are {tuple(in_file)}')
            elif [c for c in in_file if c in classes] != list(classes):
                problems.append(
                    f"the {split} classes are not in the order of {leaf.ann_file}'s "
                    "categories, and MMDetection numbers them in the file's order: write "
                    f'classes={tuple(c for c in in_file if c in classes)}')
        folder_to_idx = getattr(leaf, 'folder_to_idx', None)
        if folder_to_idx:
            folders = tuple(sorted(folder_to_idx, key=folder_to_idx.get))
            if folders != classes:
                problems.append(
                    f'the {split} classes {classes} are not the class folders of '
                    f'{leaf.img_prefix} in sorted order {folders}: label i is the i-th '
                    f'folder, so write classes={folders} (or leave classes out to take them)')
    return problems


def stray_labels(data_samples, classes: tuple, ignore_index: int, split: str) -> str:
    """What to do about the label maps of a batch (MMSegmentation's ``SegDataSample``) that
    hold values that are neither a class index nor ``ignore_index``; '' when none does.
    Such a value stops the loss (``IndexError: Target 9 is out of bounds``, naming no file)
    and is counted in no class by ``IoUMetric``."""
    found = []
    for sample in data_samples:
        labels = sample.gt_sem_seg.data if 'gt_sem_seg' in sample else None
        if labels is not None and (labels >= len(classes)).any():
            values = labels[(labels >= len(classes)) & (labels != ignore_index)].unique()
            if len(values):
                found.append(f'  {sample.metainfo.get("seg_map_path")}: '
                             + ', '.join(map(str, values.tolist()))
                             + (' (after reduce_zero_label: the value in the file - 1)'
                                if sample.metainfo.get('reduce_zero_label') else ''))
    if not found:
        return ''
    names = ', '.join(f'{i} {name!r}' for i, name in enumerate(classes))
    return '\n'.join([
        f'label values that are neither a class index nor the ignore index, in the {split} '
        'data:', *found,
        f"The {split} dataset's {len(classes)} classes ({names}) are the pixel values "
        f'0-{len(classes) - 1}, and the ignore index {ignore_index} marks pixels to leave out. '
        'Fix the files, or:',
        '  - 0 means unlabelled and the classes are the values 1..N: reduce_zero_label=True in '
        'the dataset;',
        f'  - pixels nobody labelled: write {ignore_index} into them;',
        "  - another numbering: map the values to the classes with MMSegmentation's label_map "
        '(a dataset type whose METAINFO classes name every value of the files, and '
        'metainfo=dict(classes=...) those to keep; the others become 255);',
        "  - a class left out: add it to classes and to every head's num_classes.",
        '(docs/custom_data.md)'])


@HOOKS.register_module()
class ClassesCheckHook(Hook):
    """Stop at the start of training (train and val data) or testing (test data) when the
    model and the data disagree on the classes (:func:`head_problems`, :func:`data_problems`),
    and at a batch whose label maps hold a value that is neither a class nor the ignore index
    (:func:`stray_labels`), with ``ValueError`` saying what to change. A head left at COCO's
    80 or ADE20K's 150 classes trains without an error and is found wrong only by the
    evaluation after the run. MMDetection's ``NumClassCheckHook`` also checks the backbone's
    ``num_classes``, which is 0 in our detection configs.

    Example::

        custom_hooks = [dict(type='ClassesCheckHook')]
    """
    priority = 'VERY_HIGH'

    def __init__(self) -> None:
        self._labels = {}  # split -> (classes, ignore index) of a segmentation dataset

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._check_labels('train', data_batch)

    def before_val_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._check_labels('val', data_batch)

    def before_test_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._check_labels('test', data_batch)

    def _check_labels(self, split: str, data_batch) -> None:
        if split in self._labels and isinstance(data_batch, dict):
            problem = stray_labels(data_batch.get('data_samples') or (), *self._labels[split],
                                   split)
            if problem:
                raise ValueError(problem)

    def before_train(self, runner) -> None:
        self._check(runner, [('train', runner.train_dataloader),
                             ('val', runner.val_loop.dataloader if runner.val_loop else None)])

    def before_test(self, runner) -> None:
        self._check(runner, [('test', runner.test_loop.dataloader)])

    def _check(self, runner, loaders) -> None:
        model = runner.model.module if hasattr(runner.model, 'module') else runner.model
        problems, reference = [], None
        for split, loader in loaders:
            if loader is None:
                continue
            classes = _classes(loader.dataset)
            if not classes:
                continue  # a dataset without class names: nothing to check against
            seg = [d for d in _leaf_datasets(loader.dataset) if hasattr(d, 'reduce_zero_label')]
            if seg:  # MMSegmentation's label maps: the loss's ignore index is the head's
                self._labels[split] = classes, getattr(getattr(model, 'decode_head', None),
                                                       'ignore_index', seg[0].ignore_index)
            if isinstance(classes, str):
                problems.append(f"the {split} dataset's classes is the string {classes!r}: "
                                f'write classes=({classes!r}, ) for one class')
                continue
            if reference is None:
                reference = split, classes
                problems += head_problems(model, classes, split)
            elif classes != reference[1]:
                problems.append(f'the {split} dataset has the classes {classes}, the '
                                f'{reference[0]} dataset {reference[1]}: give both the same '
                                'metainfo=dict(classes=...)')
            problems += data_problems(loader.dataset, split)
        if problems:
            raise ValueError('the model and the data disagree on the classes:\n  - '
                             + '\n  - '.join(problems)
                             + '\n(every head that classifies needs len(classes); '
                             'docs/custom_data.md)')
