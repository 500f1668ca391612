"""Write small, learnable datasets in the real ImageNet, COCO-instances and ADE20K layouts.

Each image shows a few coloured shapes (circle, square, triangle; a per-class tint with random
jitter, random size and rotation, never overlapping) on a low-contrast grey texture. Every
object is a polygon; its pixels are painted from the same rasterisation pycocotools uses to
decode the polygon, so the annotated masks are exact. The ImageNet-layout set, for the demo's
classification pretraining, shows one such shape per image, labelled by its class. Everything is
deterministic given ``--seed``.

``--cue texture`` writes the same layouts with classes that no colour gives away: each class
fills its shape with its own pattern (circle: stripes, square: checks, triangle: dots) in two
random colours, at a random period and angle, on a background of random colours with
distractor lines and blobs. A backbone pretrained on its ImageNet layout detects and segments
it better than a random one after the same few iterations
(tests/test_configs/test_trained_floors.py measures how much); on the default ``tint`` data
the tints alone are learnt in a few iterations, pretrained or not (docs/demo.md).

    python tools/misc/make_demo_data.py --out data/demo          # COCO and ADE20K layouts
    python tools/misc/make_demo_data.py --out data/demo --imagenet-train 3000 --imagenet-val 300
    python tools/misc/make_demo_data.py --out data/demo --coco-train 400 --size 256
    python tools/misc/make_demo_data.py --out data/texture --cue texture --imagenet-train 6000

Layouts written under ``--out``:

    imagenet/{train,val}/{circle,square,triangle}/*.jpg
    coco/annotations/instances_{train,val}2017.json, coco/{train,val}2017/*.jpg
    ade/images/{training,validation}/*.jpg, ade/annotations/{training,validation}/*.png

The ADE20K-style label maps follow ADE's reduce-zero-label convention: 0 = unlabelled
(a thin band around each object, ignored by training and evaluation), k >= 1 = class k - 1.
"""
import argparse
import json
import math
import os
import os.path as osp

import numpy as np
from PIL import Image, ImageFilter
from pycocotools import mask as mask_utils

SHAPES = ('circle', 'square', 'triangle')
# Classes of the segmentation set, in label-map order (value k + 1 in the PNGs).
SEG_CLASSES = ('background', ) + SHAPES
SEG_PALETTE = [[120, 120, 120], [220, 20, 60], [0, 130, 230], [250, 170, 30]]
CIRCLE_VERTICES = 48
CLASS_TINTS = dict(circle=(225, 40, 40), square=(40, 90, 235), triangle=(40, 215, 60))


def textured_background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Low-contrast grey texture (smooth blotches, faint stripes, pixel noise): clutter a
    detector must learn to ignore, but grey, so that the saturated class tints stand out and
    a short run from scratch can learn them."""
    level = rng.uniform(100, 160)
    coarse = rng.uniform(-15, 15, size=(size // 16 + 1, size // 16 + 1)).astype(np.float32)
    blotches = np.asarray(Image.fromarray(coarse, mode='F').resize((size, size), Image.BICUBIC))
    yy, xx = np.mgrid[0:size, 0:size]
    angle = rng.uniform(0, math.pi)
    stripes = 4 * np.sin((xx * math.cos(angle) + yy * math.sin(angle)) / rng.uniform(3, 8))
    noise = rng.normal(0, 4, size=(size, size, 3))
    return np.clip(level + (blotches + stripes)[..., None] + noise, 0, 255)


def shape_polygon(kind: str, cx: float, cy: float, radius: float, angle: float) -> list:
    """Flat [x0, y0, x1, y1, ...] polygon of a shape inscribed in a circle of ``radius``."""
    corners = {'circle': CIRCLE_VERTICES, 'square': 4, 'triangle': 3}[kind]
    points = []
    for i in range(corners):
        a = angle + 2 * math.pi * i / corners
        points += [cx + radius * math.cos(a), cy + radius * math.sin(a)]
    return points


def rasterise(polygon: list, size: int) -> np.ndarray:
    rle = mask_utils.merge(mask_utils.frPyObjects([polygon], size, size))
    return mask_utils.decode(rle).astype(bool)


def random_objects(rng: np.random.Generator, size: int, max_objects: int) -> list:
    """Non-overlapping (kind, polygon, mask) triples, 24%-56% of the image side across."""
    objects, occupied = [], np.zeros((size, size), bool)
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _attempt in range(20):
            kind = SHAPES[int(rng.integers(len(SHAPES)))]
            radius = rng.uniform(0.12, 0.28) * size
            cx, cy = rng.uniform(radius, size - radius, size=2)
            polygon = shape_polygon(kind, cx, cy, radius, rng.uniform(0, 2 * math.pi))
            mask = rasterise(polygon, size)
            if mask.any() and not (mask & occupied).any():
                objects.append((kind, polygon, mask))
                occupied |= mask
                break
    return objects


def draw(rng: np.random.Generator, size: int, objects: list, cue: str = 'tint') -> np.ndarray:
    if cue == 'texture':
        return draw_textured(rng, size, objects)
    image = textured_background(rng, size)
    for kind, _polygon, mask in objects:
        # Each class has its own saturated tint (jittered per object), off the background's
        # greys, so that a few hundred iterations from scratch can learn the classes.
        colour = np.array(CLASS_TINTS[kind], np.float64) + rng.uniform(-40, 40, size=3)
        shading = rng.normal(0, 6, size=(int(mask.sum()), 3))
        image[mask] = np.clip(colour + shading, 0, 255)
    return image.astype(np.uint8)


# --cue texture: each class fills its shape with its own pattern (stripes, checks, dots) in two
# random colours, at a random period and angle, on a background of random colours with
# distractors (blotches, lines, patches of plain or noisy colour) that are no class.
PATTERNS = dict(circle='stripes', square='checks', triangle='dots')
PERIODS = (3.5, 6.0)  # of the patterns, in pixels


def pattern_mask(rng: np.random.Generator, size: int, kind: str) -> np.ndarray:
    """Where ``kind``'s pattern takes its first colour, over the whole image."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    angle, period = rng.uniform(0, math.pi), rng.uniform(*PERIODS)
    u = (xx * math.cos(angle) + yy * math.sin(angle)) * 2 * math.pi / period
    v = (yy * math.cos(angle) - xx * math.sin(angle)) * 2 * math.pi / period
    u, v = u + rng.uniform(0, 2 * math.pi), v + rng.uniform(0, 2 * math.pi)
    name = PATTERNS[kind]
    if name == 'stripes':
        return np.sin(u) > 0
    if name == 'checks':
        return np.sin(u) * np.sin(v) > 0
    return np.cos(u) + np.cos(v) > 1.0


def two_colours(rng: np.random.Generator) -> tuple:
    """Two random colours at least 90 apart in mean level, so that a pattern shows."""
    while True:
        a, b = rng.uniform(0, 255, size=(2, 3))
        if abs(a.mean() - b.mean()) > 90:
            return a, b


def draw_textured(rng: np.random.Generator, size: int, objects: list) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size]
    base = rng.uniform(40, 215, size=3)
    coarse = rng.uniform(-35, 35, size=(size // 12 + 1, size // 12 + 1, 3)).astype(np.float32)
    blotches = np.stack([np.asarray(Image.fromarray(coarse[..., c], mode='F').resize(
        (size, size), Image.BICUBIC)) for c in range(3)], -1)
    image = base + blotches + rng.normal(0, 6, size=(size, size, 3))
    for _ in range(int(rng.integers(2, 5))):  # distractors
        colour = rng.uniform(0, 255, size=3)
        if rng.uniform() < 0.5:  # a line
            angle, offset = rng.uniform(0, math.pi), rng.uniform(0, size)
            dist = xx * math.cos(angle) + yy * math.sin(angle) - offset
            region = np.abs(dist) < rng.uniform(0.8, 2.5)
        else:  # a blob, plain or noisy
            cx, cy = rng.uniform(0, size, size=2)
            rx, ry = rng.uniform(0.05, 0.2, size=2) * size
            region = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 < 1
        noise = rng.normal(0, rng.choice([3.0, 30.0]), size=(int(region.sum()), 3))
        image[region] = colour + noise
    for kind, _polygon, mask in objects:
        first, second = two_colours(rng)
        on = pattern_mask(rng, size, kind)
        image[mask & on], image[mask & ~on] = first, second
        image[mask] += rng.normal(0, 6, size=(int(mask.sum()), 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def write_coco(out: str, split: str, num_images: int, size: int, max_objects: int,
               rng: np.random.Generator, cue: str = 'tint') -> None:
    img_dir = osp.join(out, f'{split}2017')
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(osp.join(out, 'annotations'), exist_ok=True)
    images, annotations = [], []
    for image_id in range(1, num_images + 1):
        objects = random_objects(rng, size, max_objects)
        file_name = f'{image_id:012d}.jpg'
        Image.fromarray(draw(rng, size, objects, cue)).save(osp.join(img_dir, file_name),
                                                       quality=95)
        images.append(dict(id=image_id, file_name=file_name, height=size, width=size))
        for kind, polygon, mask in objects:
            ys, xs = np.nonzero(mask)
            x0, y0 = float(xs.min()), float(ys.min())
            annotations.append(dict(
                id=len(annotations) + 1, image_id=image_id,
                category_id=SHAPES.index(kind) + 1, segmentation=[polygon],
                area=float(mask.sum()), iscrowd=0,
                bbox=[x0, y0, float(xs.max()) + 1 - x0, float(ys.max()) + 1 - y0]))
    categories = [dict(id=i + 1, name=name, supercategory='shape')
                  for i, name in enumerate(SHAPES)]
    with open(osp.join(out, 'annotations', f'instances_{split}2017.json'), 'w') as f:
        json.dump(dict(images=images, annotations=annotations, categories=categories), f)


def write_imagenet(out: str, split: str, num_images: int, size: int,
                   rng: np.random.Generator, cue: str = 'tint') -> None:
    """One shape per image (classes in turn, so the split is balanced), in the folder of its
    class: the folder layout MMPretrain's ``ImageNet`` dataset reads without a list file.
    Shapes have their class tints, as in the detection set (docs/demo.md measures a variant
    with random colours: it did not learn within the demo's budget).
    The shape spans 40%-90% of the side: at 64 px, 26-58 px, near the 31-72 px of the
    detection set's objects at 128 px, so that pretraining sees objects at the scale that
    detection will."""
    for kind in SHAPES:
        os.makedirs(osp.join(out, split, kind), exist_ok=True)
    for index in range(num_images):
        kind = SHAPES[index % len(SHAPES)]
        radius = rng.uniform(0.2, 0.45) * size
        cx, cy = rng.uniform(radius, size - radius, size=2)
        polygon = shape_polygon(kind, cx, cy, radius, rng.uniform(0, 2 * math.pi))
        image = draw(rng, size, [(kind, polygon, rasterise(polygon, size))], cue)
        Image.fromarray(image).save(osp.join(out, split, kind, f'{index:06d}.jpg'), quality=95)


def write_ade(out: str, split: str, num_images: int, size: int, max_objects: int,
              rng: np.random.Generator, cue: str = 'tint') -> None:
    img_dir = osp.join(out, 'images', split)
    ann_dir = osp.join(out, 'annotations', split)
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(ann_dir, exist_ok=True)
    for index in range(1, num_images + 1):
        objects = random_objects(rng, size, max_objects)
        label = np.full((size, size), SEG_CLASSES.index('background') + 1, np.uint8)
        for kind, _polygon, mask in objects:
            grown = np.asarray(Image.fromarray(mask.astype(np.uint8) * 255)
                               .filter(ImageFilter.MaxFilter(5))) > 0
            label[grown & ~mask] = 0
            label[mask] = SEG_CLASSES.index(kind) + 1
        name = f'ADE_{split}_{index:08d}'
        Image.fromarray(draw(rng, size, objects, cue)).save(osp.join(img_dir, name + '.jpg'),
                                                            quality=95)
        Image.fromarray(label).save(osp.join(ann_dir, name + '.png'))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', default='data/demo', help='output root')
    parser.add_argument('--size', type=int, default=128, help='image side in pixels')
    parser.add_argument('--imagenet-train', type=int, default=0,
                        help='ImageNet-layout (one shape per image) train images')
    parser.add_argument('--imagenet-val', type=int, default=0,
                        help='ImageNet-layout val images')
    parser.add_argument('--imagenet-size', type=int, default=64,
                        help='side of the ImageNet-layout images in pixels')
    parser.add_argument('--coco-train', type=int, default=160, help='COCO train images')
    parser.add_argument('--coco-val', type=int, default=40, help='COCO val images')
    parser.add_argument('--ade-train', type=int, default=120, help='ADE train images')
    parser.add_argument('--ade-val', type=int, default=20, help='ADE val images')
    parser.add_argument('--max-objects', type=int, default=3, help='objects per image, at most')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--cue', choices=('tint', 'texture'), default='tint',
                        help='what tells the classes apart: tint (each class its colour, the '
                        "demo's) or texture (each its pattern in random colours, distractors)")
    args = parser.parse_args(argv)
    for name in ('size', 'imagenet_size'):
        if getattr(args, name) < 32:
            raise ValueError(f'--{name.replace("_", "-")} must be >= 32 pixels, '
                             f'got {getattr(args, name)}')
    if args.max_objects < 1:
        raise ValueError(f'--max-objects must be >= 1, got {args.max_objects}')
    for name in ('imagenet_train', 'imagenet_val', 'coco_train', 'coco_val', 'ade_train',
                 'ade_val'):
        if getattr(args, name) < 0:
            raise ValueError(f'--{name.replace("_", "-")} must be >= 0, '
                             f'got {getattr(args, name)}')
    return args


def main(argv=None):
    args = parse_args(argv)
    # One generator per split, so changing one split's size leaves the others unchanged
    # (SeedSequence children depend on their index only).
    seeds = np.random.SeedSequence(args.seed).spawn(6)
    jobs = [(write_coco, osp.join(args.out, 'coco'), 'train', args.coco_train),
            (write_coco, osp.join(args.out, 'coco'), 'val', args.coco_val),
            (write_ade, osp.join(args.out, 'ade'), 'training', args.ade_train),
            (write_ade, osp.join(args.out, 'ade'), 'validation', args.ade_val)]
    for (writer, root, split, count), seed in zip(jobs, seeds):
        if count:
            writer(root, split, count, args.size, args.max_objects, np.random.default_rng(seed),
                   args.cue)
    imagenet = osp.join(args.out, 'imagenet')
    for split, count, seed in (('train', args.imagenet_train, seeds[4]),
                               ('val', args.imagenet_val, seeds[5])):
        if count:
            write_imagenet(imagenet, split, count, args.imagenet_size,
                           np.random.default_rng(seed), args.cue)
    print(f'wrote ImageNet ({args.imagenet_train} train / {args.imagenet_val} val, '
          f'{args.imagenet_size}px), COCO ({args.coco_train} train / {args.coco_val} val) and '
          f'ADE20K ({args.ade_train} train / {args.ade_val} val, {args.size}px) layouts under '
          f'{args.out}')


if __name__ == '__main__':
    main()
