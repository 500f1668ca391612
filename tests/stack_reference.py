"""The seven models' outputs for weights and an input made without torch's random generator,
so that every stack builds the same numbers: the stack check compares each stack with the file
the pinned stack wrote (tests/test_stacks/pinned_outputs.npz). And a short training run's
record (:func:`training_record`: the losses of each iteration and a digest of the final
weights), compared with the pinned stack's (tests/test_stacks/pinned_training.json).

    .venv/bin/python tests/stack_reference.py            # rewrite it (on the pinned stack only)
    .venv-prebuilt/bin/python tests/stack_reference.py --compare   # this stack's differences
    .venv/bin/python tests/stack_reference.py --training WORK_DIR INIT   # rewrite the record
    .venv-prebuilt/bin/python tests/stack_reference.py --compare-training WORK_DIR INIT

Weights and input come from PCG64's raw 64-bit stream (numpy's bit generators promise the same
stream on every release, which their distributions do not), scaled to uniform values of the
spread each tensor's kind needs: fan-in scaled matrices, norm weights near 1, small biases,
BatchNorm statistics away from 0 and 1 (so that loading them is checked too).
"""
import glob
import json
import os.path as osp
import sys
import zlib

import numpy as np
import torch

from cvt_mm.models import CMTModel, CvTModel

HERE = osp.dirname(osp.abspath(__file__))
REFERENCE = osp.join(HERE, 'test_stacks', 'pinned_outputs.npz')
TRAINING_REFERENCE = osp.join(HERE, 'test_stacks', 'pinned_training.json')
MODELS = {'cvt_13': lambda: CvTModel('13'), 'cvt_21': lambda: CvTModel('21'),
          'cvt_w24': lambda: CvTModel('w24'), 'cmt_ti': lambda: CMTModel('ti'),
          'cmt_xs': lambda: CMTModel('xs'), 'cmt_s': lambda: CMTModel('s'),
          'cmt_b': lambda: CMTModel('b')}
INPUT_SHAPE = (2, 3, 96, 128)


def uniform(seed: int, n: int) -> np.ndarray:
    """``n`` values uniform in [-1, 1) from PCG64(seed)'s raw stream."""
    raw = np.random.PCG64(seed).random_raw(n)
    return (raw >> np.uint64(11)).astype(np.float64) * 2.0 ** -52 - 1.0


def _values(name: str, shape, seed: int) -> torch.Tensor:
    n = int(np.prod(shape)) if shape else 1
    u = uniform(seed, n).reshape(shape)
    leaf = name.rsplit('.', 1)[-1]
    if leaf == 'running_var':
        v = 1.0 + 0.5 * np.abs(u)
    elif leaf == 'running_mean' or leaf == 'bias':
        v = 0.1 * u
    elif len(shape) <= 1:  # norm weights, scales
        v = 1.0 + 0.2 * u
    else:  # uniform with variance 1/fan_in
        v = u * np.sqrt(3.0 / int(np.prod(shape[1:])))
    return torch.from_numpy(v.astype(np.float32))


def fill(model: torch.nn.Module, name: str) -> torch.nn.Module:
    """Overwrite every floating tensor of ``model``'s state dict, each from its own seed."""
    with torch.no_grad():
        for key, t in model.state_dict().items():
            if t.is_floating_point():
                t.copy_(_values(key, tuple(t.shape), zlib.crc32(f'{name}/{key}'.encode())))
    return model.eval()


def image() -> torch.Tensor:
    return torch.from_numpy(uniform(7, int(np.prod(INPUT_SHAPE))).reshape(INPUT_SHAPE)
                            .astype(np.float32))


def outputs(name: str) -> dict:
    """``{'<name>/logits': ..., '<name>/stage<i>': ...}`` as float64 arrays: the logits and
    each stage's map (mean over space, so the file stays small) for :func:`image`."""
    model = fill(MODELS[name](), name)
    x = image()
    with torch.no_grad():
        logits = model(x)
        maps = model.forward_intermediates(x, intermediates_only=True)
    out = {f'{name}/logits': logits.double().numpy()}
    for i, m in enumerate(maps):
        out[f'{name}/stage{i}'] = m.double().mean(dim=(2, 3)).numpy()
    return out


def compare() -> int:
    """Print each output's largest difference from the file, relative to its largest value."""
    with np.load(REFERENCE) as f:
        reference = {k: f[k] for k in f.files}
    print(f'torch {torch.__version__} against the file of torch {reference["torch_version"]}')
    for name in MODELS:
        errors = {k: np.abs(v - reference[k]).max() / np.abs(reference[k]).max()
                  for k, v in outputs(name).items()}
        print(f'{name:8} logits {errors[f"{name}/logits"]:.1e}  stages (max) '
              f'{max(v for k, v in errors.items() if "stage" in k):.1e}')
    return 0


def training_record(work_dir: str, init: str, checkpoint: str = 'iter_4.pth') -> dict:
    """A finished run's losses per iteration (MMEngine's ``vis_data/scalars.json``) and a
    digest of what training changed: per tensor, the L2 norm of its update (the checkpoint's
    weights minus ``init``'s) and two projections of the update onto fixed vectors of
    :func:`uniform` (stack-independent), so that a different update moves the digest by about
    its own size without the file holding the weights."""
    from cvt_mm.checkpoint import read_local
    scalars = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))[-1]
    losses = {}
    with open(scalars) as f:
        for line in f:
            entry = json.loads(line)
            if 'loss' in entry:
                losses[str(entry['iter'])] = {k: v for k, v in entry.items() if 'loss' in k}
    start = read_local(init, mmap=False)['state_dict']
    end = read_local(osp.join(work_dir, checkpoint), mmap=False)['state_dict']
    update = {k: end[k] - start[k] for k in end if end[k].is_floating_point()}
    return dict(torch_version=torch.__version__, losses=losses, update=update_digest(update))


def update_digest(update: dict) -> dict:
    """Per tensor of ``update``: its L2 norm and two projections (see :func:`training_record`)."""
    digest = {}
    for key, t in update.items():
        v = t.double().flatten().numpy()
        seed = zlib.crc32(key.encode())
        digest[key] = [float(np.linalg.norm(v))] + [
            float(uniform(seed + i, v.size) @ v) for i in range(2)]
    return digest


def compare_training(record: dict, reference: dict) -> dict:
    """How far ``record`` is from ``reference``: ``losses``, the largest difference relative to
    the loss (and where); ``update``, the difference of the update's projections over all
    tensors relative to the size of the reference's whole update (a relative error of the
    update, about 0.6x its true value: a projection onto uniform [-1, 1) entries keeps 1/3 of
    the squared norm)."""
    assert record['losses'].keys() == reference['losses'].keys(), 'other iterations logged'
    assert record['update'].keys() == reference['update'].keys(), 'other weights'
    losses = max((abs(v - reference['losses'][i][k]) / max(abs(reference['losses'][i][k]),
                                                             1e-12), f'iteration {i} {k}')
                 for i, entry in record['losses'].items() for k, v in entry.items())
    moved = sum(sum((a - b) ** 2 for a, b in zip(v[1:], reference['update'][k][1:]))
                for k, v in record['update'].items())
    size = sum(v[0] ** 2 for v in reference['update'].values())
    worst = max(record['update'], key=lambda k: sum(
        (a - b) ** 2 for a, b in zip(record['update'][k][1:], reference['update'][k][1:])))
    return dict(losses=losses, update=(float(np.sqrt(moved / max(size, 1e-300))),
                                       f'most in {worst}'))


def main() -> int:
    if sys.argv[1:] == ['--compare']:
        return compare()
    if len(sys.argv) == 4 and sys.argv[1] in ('--training', '--compare-training'):
        record = training_record(sys.argv[2], sys.argv[3])
        if sys.argv[1] == '--training':
            with open(TRAINING_REFERENCE, 'w') as f:
                json.dump(record, f, indent=1, sort_keys=True)
            print('wrote', TRAINING_REFERENCE)
            return 0
        with open(TRAINING_REFERENCE) as f:
            reference = json.load(f)
        print(f'torch {torch.__version__} against the record of torch '
              f'{reference["torch_version"]}:', compare_training(record, reference))
        return 0
    found = {}
    for name in MODELS:
        found.update(outputs(name))
        print(name, 'logits max |x|', float(np.abs(found[f'{name}/logits']).max()))
    found['torch_version'] = np.array(torch.__version__)
    np.savez_compressed(REFERENCE, **found)
    print('wrote', REFERENCE)
    return 0


if __name__ == '__main__':
    sys.exit(main())
