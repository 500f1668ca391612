#!/usr/bin/env bash
# Create (or reuse) the project virtual environment with the verified stack.
#
#   tools/misc/setup_env.sh            # .venv next to this repository
#   CVT_MM_VENV=/path tools/misc/setup_env.sh
#
# Re-running is instant: a stamp records the hash of the files that define the environment,
# and nothing is reinstalled while it matches. Editing requirements.txt, pyproject.toml or this
# script triggers an incremental `pip install` (pip's wheel cache keeps the mmcv build).
#
# GPU boxes: mmcv's CUDA ops are compiled when `nvcc` is on PATH (or CUDA_HOME is set) and a GPU
# is visible (`nvidia-smi`), or when FORCE_CUDA=1. TORCH_CUDA_ARCH_LIST defaults to the visible
# GPUs' compute capability. See README "Installation on a GPU machine".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

VENV=${CVT_MM_VENV:-.venv}
PYTHON=${PYTHON:-python3.11}
stamp="$VENV/.cvt_mm_env_stamp"
want=$(cat requirements.txt pyproject.toml tools/misc/setup_env.sh | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi

started=$SECONDS
step() {  # step NAME: say what runs now, and how long the previous step took
    local now=$SECONDS
    [[ -n "${step_name:-}" ]] && echo "setup_env: ${step_name} took $((now - step_start)) s"
    step_name=$1
    step_start=$now
    echo "setup_env: ${step_name}"
}

if [[ ! -x "$VENV/bin/python" ]]; then
    command -v "$PYTHON" >/dev/null || { echo "setup_env: '$PYTHON' not found; install Python 3.11 or set PYTHON=" >&2; exit 1; }
    step "creating $VENV with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
pin() { grep -E "^$1[=<>!~ ]" requirements.txt | head -n1 | tr -d ' '; }

version_of() { pin "$1" | sed -E 's/^[a-z]+[=<>!~]+//'; }

# 1. torch/torchvision first: mmcv compiles against the installed torch. A build of the pinned
#    version for another CUDA (e.g. 2.13.0+cu126 from PyTorch's index, installed beforehand) is
#    kept; one beside which torchvision does not load (2.13.0+cpu) is replaced.
if ! "$VENV/bin/python" - "$(version_of torch)" "$(version_of torchvision)" 2>/dev/null <<'PY'
import sys, torch, torchvision
assert torch.__version__.split('+')[0] == sys.argv[1], torch.__version__
assert torchvision.__version__.split('+')[0] == sys.argv[2], torchvision.__version__
PY
then
    step "[1/3] installing $(pin torch) and $(pin torchvision) (about a minute)"
    "${pip[@]}" install -q "$(pin torch)" "$(pin torchvision)"
fi

# 2. mmcv with its ops; CUDA kernels where a CUDA toolkit and GPU exist.
if ! "$VENV/bin/python" -c "import mmcv, mmcv.ops" 2>/dev/null; then
    if [[ -z "${FORCE_CUDA:-}" ]] && command -v nvidia-smi >/dev/null 2>&1 \
        && { command -v nvcc >/dev/null 2>&1 || [[ -n "${CUDA_HOME:-}" ]]; }; then
        export FORCE_CUDA=1
    fi
    if [[ "${FORCE_CUDA:-0}" == "1" ]]; then
        export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
        # torch's CUDA wheels ship headers (cusparse.h, ...) some system toolkits lack.
        nv_inc=$("$VENV/bin/python" -c "import glob,site;print(':'.join(glob.glob(site.getsitepackages()[0]+'/nvidia/*/include')))")
        export CPATH="${nv_inc}${CPATH:+:$CPATH}"
        if [[ -z "${TORCH_CUDA_ARCH_LIST:-}" ]] && command -v nvidia-smi >/dev/null 2>&1; then
            TORCH_CUDA_ARCH_LIST=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | sort -u | paste -sd ';')
            export TORCH_CUDA_ARCH_LIST
        fi
        step "[2/3] building $(pin mmcv) with CUDA ops (CUDA_HOME=$CUDA_HOME, arch=${TORCH_CUDA_ARCH_LIST:-default}; about 20 minutes on 2 cores, seconds when pip has it cached)"
    else
        step "[2/3] building $(pin mmcv) with CPU ops from source (about 8-14 minutes on 2 cores, seconds when pip has it cached)"
    fi
    # Python's default CFLAGS carry -g: debug info made the build 1175 s and _ext.so 83 MB on
    # 2 cores; without it (and with -O2 -DNDEBUG, which setting CFLAGS must restate) 817 s and
    # 1.9 MB. Setting CFLAGS replaces Python's flags, so the user's own go after ours.
    export CFLAGS="-DNDEBUG -O2 -g0 -fwrapv${CFLAGS:+ $CFLAGS}"
    # mmcv's setup.py imports pkg_resources, which setuptools>=70 no longer ships, while torch
    # declares setuptools>=77. The old setuptools (with wheel and ninja) goes into a folder of
    # its own, seen only by the build through PYTHONPATH: the venv keeps torch's setuptools.
    # torch's extension builder compiles in parallel only when it finds `ninja` on PATH.
    # Absolute paths: pip runs mmcv's setup.py from a temporary folder of its own, where a
    # relative PYTHONPATH points nowhere and the venv's pkg_resources-less setuptools is found.
    venv_abs=$(cd "$VENV" && pwd)
    build_tools="$venv_abs/.mmcv-build-tools"
    wheels="$venv_abs/.mmcv-wheel"
    rm -rf "$wheels"
    # pip compares a --target install with the venv's packages and would print a resolver
    # ERROR (torch wants setuptools>=77) about a folder the venv never imports.
    "${pip[@]}" install -q --no-warn-conflicts --upgrade --target "$build_tools" \
        "setuptools<70" wheel ninja
    PATH="$build_tools/bin:$venv_abs/bin:$PATH" PYTHONPATH="$build_tools" \
        MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
        "${pip[@]}" wheel -q --no-build-isolation --no-deps -w "$wheels" "$(pin mmcv)"
    "${pip[@]}" install -q "$wheels"/mmcv-*.whl
fi

# 3. Everything else, then this package in editable mode.
# torch/torchvision are left out here: step 1 settled them, and `===` would not accept a
# local build such as 2.13.0+cu126.
step "[3/3] installing the OpenMMLab toolboxes, timm, transformers, smp, the test and deploy extras, and cvt_mm (editable)"
"${pip[@]}" install -q -r <(grep -vE '^(torch|torchvision)[=<>!~ ]' requirements.txt)
"${pip[@]}" install -q --no-deps -e .
# The `tests` and `deploy` extras (pytest, ruff, tensorboard; ONNX export, which the suite
# runs): their bounds live in pyproject.toml, and the package's own dependencies are met by
# now, so this adds only those.
"${pip[@]}" install -q -e ".[tests,deploy]"
"$VENV/bin/python" -c "import torch, torchvision, mmcv.ops, mmdet, mmseg, mmpretrain, cvt_mm, onnxruntime, onnxscript, timm, transformers, segmentation_models_pytorch" \
    || { echo "setup_env: the environment in $VENV does not import; see the errors above" >&2; exit 1; }
step done
echo "$want" > "$stamp"
echo "setup_env: ready ($VENV) in $((SECONDS - started)) s"
