#!/usr/bin/env bash
# `make demo`: train Mask R-CNN with CvT-13 (configs/demo/mask_rcnn_cvt13_demo.py, which
# inherits configs/mask_rcnn_cvt13_coco.py) from scratch on a generated COCO-layout shapes
# dataset on the CPU, evaluate COCO bbox/segm mAP, and write pictures of the predictions.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
CONFIG=configs/demo/mask_rcnn_cvt13_demo.py
WORK_DIR=${WORK_DIR:-work_dirs/demo_mask_rcnn_cvt13}
OUT=${OUT:-outputs/demo}
start=$(date +%s)

echo "== 1/4 demo data (COCO and ADE20K layouts) -> data/demo"
"$PY" tools/misc/make_demo_data.py --out data/demo

echo "== 2/4 train $CONFIG on the CPU (progress and ETA in the log)"
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR"

echo "== 3/4 evaluate COCO bbox/segm mAP on the val split, pictures -> $OUT/predictions"
CKPT=$(cat "$WORK_DIR/last_checkpoint")  # absolute path of the final checkpoint
"$PY" tools/test.py "$CONFIG" "$CKPT" --work-dir "$WORK_DIR/test" \
    --show-dir "$OUT/predictions"

echo "== 4/4 image demo on one val image -> $OUT/image_demo.jpg"
IMAGE=$(ls data/demo/coco/val2017/*.jpg | head -n 1)
"$PY" tools/misc/image_demo.py "$IMAGE" "$CONFIG" "$CKPT" --out-file "$OUT/image_demo.jpg"

"$PY" tools/analysis_tools/plot_curves.py "$WORK_DIR" --out "$OUT/curves"  # lists the PNGs
echo "== done in $(( $(date +%s) - start )) s: metrics in $WORK_DIR/test, pictures in $OUT"
