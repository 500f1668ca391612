#!/usr/bin/env bash
# Install this project on a GPU node that has its own CUDA build of torch and no package index:
# everything comes from a wheelhouse made by `make wheelhouse` (tools/misc/make_wheelhouse.sh).
#
#   bash tools/misc/setup_gpu_node.sh WHEELHOUSE          # then: source .gpu-site/env.sh
#
# Nothing is installed into the node's own Python environment: packages go into the folder
# .gpu-site (CVT_MM_GPU_SITE), which env.sh puts in front of the node's site-packages through
# PYTHONPATH, so the node's torch, torchvision, numpy, opencv, ... are used as they are and
# only what the node lacks is added. mmcv is compiled from source with its CUDA ops for the
# visible GPUs (TORCH_CUDA_ARCH_LIST), on all cores (MAX_JOBS). The Python is `python3`
# (PYTHON=... to choose another); it must import torch with CUDA.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
if [[ $# -ne 1 || ! -d "$1" ]]; then
    echo "usage: $0 WHEELHOUSE   (a folder made by 'make wheelhouse'; got '${1:-}')" >&2
    exit 2
fi
wheelhouse=$(cd "$1" && pwd)
site=${CVT_MM_GPU_SITE:-$root/.gpu-site}
py=${PYTHON:-python3}
stamp="$site/.stamp"
want=$( (ls -l "$wheelhouse"; cat "$0" tools/misc/gpu_node_requirements.txt; "$py" -c 'import torch; print(torch.__version__)') | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "setup_gpu_node: $site is up to date"
    exit 0
fi

"$py" - <<'PY' || { echo "setup_gpu_node: '$py' must import torch built with CUDA" >&2; exit 1; }
import torch
assert torch.version.cuda, f'torch {torch.__version__} is a CPU build'
print(f'setup_gpu_node: torch {torch.__version__} (CUDA {torch.version.cuda}), '
      f'{torch.cuda.device_count()} GPU(s)')
PY
# Start clean, but only remove a folder this script made (it leaves a marker in it).
if [[ -e "$site" && ! -f "$site/.cvt_mm_gpu_site" && -n "$(ls -A "$site" 2>/dev/null)" ]]; then
    echo "setup_gpu_node: $site exists and was not made by this script; choose another" \
         "CVT_MM_GPU_SITE" >&2
    exit 2
fi
rm -rf "$site"
mkdir -p "$site"
touch "$site/.cvt_mm_gpu_site"
export PYTHONPATH="$site:$root${PYTHONPATH:+:$PYTHONPATH}"
pip=("$py" -m pip --disable-pip-version-check install --no-index --find-links "$wheelhouse"
     --no-deps --no-compile --target "$site" -q)

# What the node lacks: every wheel of the list whose distribution the node does not have.
# The OpenMMLab packages themselves are always ours, and torchdata (an image's may predate
# StatefulDataLoader). setuptools<70 is ours too: mmcv's
# setup.py and MMEngine's Config import pkg_resources.
missing=$("$py" - tools/misc/gpu_node_requirements.txt <<'PY'
import re, sys
from importlib import metadata
ours = {'mmengine', 'mmdet', 'mmsegmentation', 'mmpretrain', 'setuptools', 'torchdata'}
for line in open(sys.argv[1]):
    line = line.split('#')[0].strip()
    if not line:
        continue
    name = re.split(r'[=<>!~ ]', line)[0]
    if name.lower() in ours:
        print(line)
        continue
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        print(line)
PY
)
echo "setup_gpu_node: installing into $site:" $missing
# shellcheck disable=SC2086
"${pip[@]}" $missing

# Python >= 3.12 has no distutils; setuptools provides it through a .pth file, which Python
# reads only in site-packages folders, not on PYTHONPATH. mmcv's build and MMEngine's
# collect_env import distutils: where the node's own setuptools does not already provide it,
# a sitecustomize makes this folder's .pth files count.
if ! "$py" -c "from distutils import errors" 2>/dev/null; then
    printf '%s\n' "# written by setup_gpu_node.sh: read this folder's .pth files (setuptools' distutils)" \
        'import os, site' 'site.addsitedir(os.path.dirname(os.path.abspath(__file__)))' \
        > "$site/sitecustomize.py"
    echo "setup_gpu_node: distutils comes from $site (sitecustomize.py)"
fi

# mmcv with CUDA ops for the GPUs on this machine.
arch=${TORCH_CUDA_ARCH_LIST:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | sort -u | paste -sd ';')}
# The toolkit: CUDA_HOME, else the folder above nvcc's bin/ (nvcc on PATH may be a wrapper
# script elsewhere), else /usr/local/cuda; it must hold bin/nvcc and include/cuda_runtime.h.
nvcc_path=$(command -v nvcc || true)
CUDA_HOME_FOUND=
for candidate in "${CUDA_HOME:-}" ${nvcc_path:+"$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")"} \
                 /usr/local/cuda; do
    if [[ -n "$candidate" && -x "$candidate/bin/nvcc" && -f "$candidate/include/cuda_runtime.h" ]]; then
        CUDA_HOME_FOUND=$candidate
        break
    fi
done
if [[ -z "$CUDA_HOME_FOUND" ]]; then
    echo "setup_gpu_node: no CUDA toolkit found (CUDA_HOME='${CUDA_HOME:-}', nvcc='$nvcc_path');" \
         "mmcv's CUDA ops need one: set CUDA_HOME" >&2
    exit 1
fi
export CUDA_HOME=$CUDA_HOME_FOUND
# torch's CUDA wheels carry headers (cusparse.h, ...) some system toolkits lack.
nv_inc=$("$py" -c "import glob, os, torch; print(':'.join(glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), 'nvidia', '*', 'include'))))")
export CPATH="${nv_inc}${CPATH:+:$CPATH}"
# torch's extension builder compiles in parallel only when `ninja` is on PATH.
py_bin=$(dirname "$(command -v "$py")")
export PATH="$PATH:$py_bin"
command -v ninja >/dev/null || echo "setup_gpu_node: no ninja on PATH: mmcv compiles one file at a time" >&2
start=$(date +%s)
echo "setup_gpu_node: building mmcv with CUDA ops (CUDA_HOME=$CUDA_HOME, arch=$arch, $(nproc) jobs)"
TORCH_CUDA_ARCH_LIST="$arch" FORCE_CUDA=1 MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
    "$py" -m pip --disable-pip-version-check install --no-index --find-links "$wheelhouse" \
    --no-deps --no-build-isolation --no-compile --target "$site" -q "$wheelhouse"/mmcv-*.tar.gz
echo "setup_gpu_node: mmcv built in $(( $(date +%s) - start )) s"

cat > "$site/env.sh" <<ENV
# source this file to use the packages of $site with the node's torch
export PYTHONPATH="$site:$root\${PYTHONPATH:+:\$PYTHONPATH}"
ENV
# The check runs one of mmcv's CUDA ops rather than asking mmcv.ops.get_compiling_cuda_version():
# on the H200 node of 2026-12-04 that call (and get_compiler_version) crashed the interpreter.
"$py" -c "import torch, torchvision, mmcv.ops, mmdet, mmseg, mmpretrain, cvt_mm, pytest; \
from mmengine.utils.dl_utils import collect_env; collect_env(); \
device = 'cuda' if torch.cuda.is_available() else 'cpu'; \
boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]], device=device); \
_, keep = mmcv.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7], device=device), 0.5); \
assert keep.tolist() == [0, 2], keep; \
print('setup_gpu_node: imports fine; mmcv', mmcv.__version__, 'runs NMS on', device)" \
    || { echo "setup_gpu_node: the stack does not import or mmcv's NMS fails; a package the node lacks may be missing from the wheelhouse" >&2; exit 1; }
echo "$want" > "$stamp"
