"""A clear error, before any model is built, when a config's dataset is not on disk: which
files were expected, in which layout, and where the docs describe the dataset."""
import os.path as osp

__all__ = ['DATASET_LAYOUTS', 'check_dataset_paths']

# Where the docs describe each dataset the configs name, and its expected layout.
DATASET_LAYOUTS = {
    'CocoDataset': ('COCO 2017 in MMDetection\'s layout',
                    ['data/coco/annotations/instances_{train,val}2017.json',
                     'data/coco/{train,val}2017/*.jpg'],
                    'docs/detection_segmentation.md, "Data"'),
    'ADE20KDataset': ('ADE20K (ADEChallengeData2016) in MMSegmentation\'s layout',
                      ['data/ade/ADEChallengeData2016/images/{training,validation}/*.jpg',
                       'data/ade/ADEChallengeData2016/annotations/{training,validation}/*.png'],
                      'docs/detection_segmentation.md, "Data"'),
    'ImageNet': ('ImageNet-1k in MMPretrain\'s layout',
                 ['data/imagenet/{train,val}/ (class folders, or with meta/{train,val}.txt)'],
                 'docs/pretraining.md, "Data"'),
}


def _dataset_paths(dataset) -> list:
    """(dataset type, [paths it reads]) of a dataset config, through wrappers."""
    while 'dataset' in dataset:  # RepeatDataset, ClassBalancedDataset, ...
        dataset = dataset['dataset']
    if 'datasets' in dataset:  # ConcatDataset
        return [p for d in dataset['datasets'] for p in _dataset_paths(d)]
    root = dataset.get('data_root') or ''
    if '://' in str(root):
        return []  # a remote backend: nothing to check on this disk
    paths = []
    if dataset.get('ann_file'):
        paths.append(osp.join(root, dataset['ann_file']))
    prefix = dataset.get('data_prefix') or {}
    for value in (prefix.values() if isinstance(prefix, dict) else [prefix]):
        if value:
            paths.append(osp.join(root, value))
    if not paths and dataset.get('split'):  # MMPretrain's ImageNet: data_root/<split>/
        paths.append(osp.join(root, dataset['split']))
    if not paths and root:
        paths.append(root)
    return [(dataset.get('type', '?'), p) for p in paths]


def check_dataset_paths(cfg, dataloaders, config_path: str) -> None:
    """Stop with one message, before anything is built, when the data the config reads is
    not on disk: which paths are missing, the layout the docs describe, and how to point
    the config elsewhere. Remote data roots (``s3://``...) are not checked."""
    missing, types = [], []
    for name in dataloaders:
        loader = cfg.get(name)
        if not loader or 'dataset' not in loader:
            continue
        for dataset_type, path in _dataset_paths(loader['dataset']):
            types.append(dataset_type)
            if not osp.exists(path):
                missing.append(f'  {name}: {path}')
    if not missing:
        return
    lines = [f'error: the data of {config_path} is not where the config looks for it '
             f'(relative paths are taken from {osp.abspath(".")}):', *missing]
    for dataset_type in dict.fromkeys(types):
        if dataset_type in DATASET_LAYOUTS:
            what, layout, where = DATASET_LAYOUTS[dataset_type]
            lines += [f'Expected: {what}:', *(f'    {p}' for p in layout),
                      f'  Getting it: {where}.']
    roots = ' '.join(f'{name}.dataset.data_root=/path/to/data/' for name in dataloaders
                     if cfg.get(name))
    lines += ['Point the config at your copy: add --cfg-options ' + roots
              + (' (and val_evaluator.ann_file / test_evaluator.ann_file for COCO)'
                 if 'CocoDataset' in types else '')
              + f", or write a config of your own with _base_ = '{config_path}' that sets them."]
    raise SystemExit('\n'.join(lines))
