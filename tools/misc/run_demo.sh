#!/usr/bin/env bash
# `make demo`: the chain this project exists for, on generated data, on the CPU.
#   1. data: ImageNet-, COCO- and ADE20K-layout shapes sets (tools/misc/make_demo_data.py)
#   2. pretrain CvT-13 by classification (configs/demo/imagenet_cvt13_demo.py, which
#      inherits our ImageNet recipe configs/imagenet_cvt13_300e_in1k.py)
#   3. fine-tune Mask R-CNN + CvT-13 from that checkpoint (configs/demo/mask_rcnn_cvt13_demo.py,
#      which inherits configs/mask_rcnn_cvt13_coco.py; the checkpoint goes in through init_cfg)
#   4. evaluate its COCO bbox/segm mAP on the val split with tools/test.py
#   5. fine-tune UperNet + CvT-13 from the same checkpoint (configs/demo/upernet_cvt13_demo.py,
#      which inherits configs/upernet_cvt13_ade20k.py)
#   6. evaluate its mIoU with tools/test.py, which also draws ground truth | prediction pairs
#   7. pictures: a grid of val detections beside their ground truth, one image's detections
#   8. training curves of the three trainings; then the results, compared with docs/demo.md's:
#      the demo exits 1 when one differs from the page (DEMO_COMPARE=0: not compared)
# Seeded and deterministic (`randomness` in every config).
# Everything is written under the current directory, where the configs look for it, as
# `tools/train.py` puts it by default: data/demo/, work_dirs/<config name>/, outputs/demo/.
# DEMO_DATA_ARGS replaces the data tool's sizes and DEMO_UPERNET_ITERS UperNet's 400 iterations
# (the tests run the whole chain on a few images, and UperNet for a few iterations).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tools/misc/cpu_malloc.sh"  # large freed blocks reused (CVT_MM_MALLOC=system: not)
PY=${PYTHON:-$ROOT/.venv/bin/python}
DEMO_DATA_ARGS=${DEMO_DATA_ARGS:---imagenet-train 3000 --imagenet-val 300 --coco-train 320 --coco-val 80}
SEG_OPTIONS=()
if [[ -n "${DEMO_UPERNET_ITERS:-}" ]]; then
    n=$DEMO_UPERNET_ITERS
    SEG_OPTIONS=(--cfg-options "train_cfg.max_iters=$n" "train_cfg.val_interval=$n"
                 "default_hooks.checkpoint.interval=$n")
fi
OUT=outputs/demo
CONFIGS=$ROOT/configs/demo
PRETRAIN_DIR=work_dirs/imagenet_cvt13_demo
DET_DIR=work_dirs/mask_rcnn_cvt13_demo
SEG_DIR=work_dirs/upernet_cvt13_demo

# Seconds each stage took on the reference machine (2 cores, nothing else running; see
# docs/demo.md): the ETA of the whole demo scales them by how fast this machine has been.
EXPECTED=(5 140 350 15 90 10 15 5)
NAMES=("demo data" "pretraining" "Mask R-CNN fine-tuning" "Mask R-CNN evaluation"
       "UperNet fine-tuning" "UperNet evaluation" "pictures" "curves")
start=$(date +%s)
begin_stage() {  # begin_stage INDEX: print the stage, the elapsed time and the demo's ETA
    local stage=$1 now elapsed done_expected=0 left_expected=0 i
    now=$(date +%s)
    elapsed=$(( now - start ))
    for (( i = 0; i < ${#EXPECTED[@]}; i++ )); do
        if (( i < stage )); then done_expected=$(( done_expected + EXPECTED[i] ));
        else left_expected=$(( left_expected + EXPECTED[i] )); fi
    done
    local left=$left_expected
    # Scale by this machine's speed once a stage long enough to measure it has run.
    (( done_expected >= 60 )) && left=$(( left_expected * elapsed / done_expected ))
    printf '\n== %d/%d %s  [%dm%02ds elapsed, about %dm%02ds left]\n' $(( stage + 1 )) \
        ${#NAMES[@]} "${NAMES[stage]}" $(( elapsed / 60 )) $(( elapsed % 60 )) \
        $(( left / 60 )) $(( left % 60 ))
}

begin_stage 0
# shellcheck disable=SC2086  # DEMO_DATA_ARGS is a list of arguments
"$PY" "$ROOT/tools/misc/make_demo_data.py" --out data/demo $DEMO_DATA_ARGS

begin_stage 1
"$PY" "$ROOT/tools/train.py" "$CONFIGS/imagenet_cvt13_demo.py"

# Both fine-tuning configs' init_cfg name the checkpoint that pretraining wrote
# (work_dirs/imagenet_cvt13_demo/epoch_3.pth): nothing is passed on the command line.
begin_stage 2
"$PY" "$ROOT/tools/train.py" "$CONFIGS/mask_rcnn_cvt13_demo.py"
DET_CKPT=$(cat "$DET_DIR/last_checkpoint")

begin_stage 3
"$PY" "$ROOT/tools/test.py" "$CONFIGS/mask_rcnn_cvt13_demo.py" "$DET_CKPT" \
    --work-dir "$DET_DIR/test"

begin_stage 4
"$PY" "$ROOT/tools/train.py" "$CONFIGS/upernet_cvt13_demo.py" ${SEG_OPTIONS[@]+"${SEG_OPTIONS[@]}"}
SEG_CKPT=$(cat "$SEG_DIR/last_checkpoint")

begin_stage 5
"$PY" "$ROOT/tools/test.py" "$CONFIGS/upernet_cvt13_demo.py" "$SEG_CKPT" \
    --work-dir "$SEG_DIR/test" --show-dir "$OUT/segmentation"

begin_stage 6
"$PY" "$ROOT/tools/analysis_tools/prediction_grid.py" "$CONFIGS/mask_rcnn_cvt13_demo.py" \
    "$DET_CKPT" --out "$OUT/val_predictions.jpg" --num-images 8 --columns 2 --upsample 3
IMAGE=$(find data/demo/coco/val2017 -name '*.jpg' | sort | head -n 1)
"$PY" "$ROOT/tools/misc/image_demo.py" "$IMAGE" "$CONFIGS/mask_rcnn_cvt13_demo.py" \
    "$DET_CKPT" --out-file "$OUT/image_demo.jpg" --score-thr 0.5 --upsample 3 --font-scale 2

begin_stage 7
for dir in "$PRETRAIN_DIR" "$DET_DIR" "$SEG_DIR"; do
    "$PY" "$ROOT/tools/analysis_tools/plot_curves.py" "$dir" \
        --out "$OUT/curves/$(basename "$dir" _cvt13_demo)"
done

total=$(( $(date +%s) - start ))
echo
echo "== demo done in $(( total / 60 ))m$(( total % 60 ))s"
COMPARE=()
[[ "${DEMO_COMPARE:-1}" == 0 ]] && COMPARE=(--no-compare)
"$PY" "$ROOT/tools/misc/demo_summary.py" "$PRETRAIN_DIR" "$DET_DIR/test" "$SEG_DIR/test" "$OUT" \
    ${COMPARE[@]+"${COMPARE[@]}"}
