#!/usr/bin/env bash
# Download what an offline GPU node needs to run this project on its own CUDA build of torch:
# the mmcv source archive and the wheels of tools/misc/gpu_node_requirements.txt (the
# OpenMMLab stack and its small dependencies, at the versions our CPU stack pins), for one
# target Python. torch, torchvision, numpy, scipy, matplotlib and opencv are left out: every
# PyTorch GPU image has them, and they would not fit in the files such a node can receive.
#
#   bash tools/misc/make_wheelhouse.sh [PYTHON_VERSION] [OUT_DIR]     # default: 3.12 wheelhouse
#   make wheelhouse PYVER=3.12 WHEELHOUSE=wheelhouse                  # the same
#
# Run it where PyPI is reachable; carry OUT_DIR to the GPU node and run there
#   make gpu-check WHEELHOUSE=OUT_DIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pyver=${1:-3.12}
out=${2:-wheelhouse}
if ! [[ $pyver =~ ^3\.[0-9]+$ ]]; then
    echo "make_wheelhouse: PYTHON_VERSION must look like 3.12, got '$pyver'" >&2
    exit 2
fi
PIP=(python3 -m pip --disable-pip-version-check)
mkdir -p "$out"
# One platform tag per manylinux generation that these packages publish: pip matches them
# exactly, so name all of them.
platforms=()
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
reqs=tools/misc/gpu_node_requirements.txt
"${PIP[@]}" download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp "${platforms[@]}" -d "$out" -r "$reqs"
# mmcv 2.1.0 publishes no wheel for current torch: the node compiles it (with CUDA ops).
# `pip download` would run its setup.py, which needs torch, so fetch the archive from the
# index's JSON API (PEP 691) and check it against PyPI's published SHA-256.
python3 - "$out" "${PIP_INDEX_URL:-https://pypi.org/simple}" <<'PY'
import hashlib, json, os, sys, urllib.request
out, index = sys.argv[1], sys.argv[2].rstrip('/')
name, sha256 = 'mmcv-2.1.0.tar.gz', 'd387bcab66b467479b6660310e23746cfc79c6e57acf04094680adb499a5cd3f'
path = os.path.join(out, name)
if not (os.path.isfile(path) and hashlib.sha256(open(path, 'rb').read()).hexdigest() == sha256):
    request = urllib.request.Request(f'{index}/mmcv/',
                                     headers={'Accept': 'application/vnd.pypi.simple.v1+json'})
    files = json.load(urllib.request.urlopen(request, timeout=60))['files']
    url = next(f['url'] for f in files if f['filename'] == name)
    data = urllib.request.urlopen(url, timeout=300).read()
    if hashlib.sha256(data).hexdigest() != sha256:
        sys.exit(f'make_wheelhouse: {url} does not have the SHA-256 PyPI publishes for {name}')
    with open(path + '.part', 'wb') as f:
        f.write(data)
    os.replace(path + '.part', path)
PY
size=$(du -sm "$out" | cut -f1)
count=$(find "$out" -maxdepth 1 -type f | wc -l)
echo "make_wheelhouse: $count files, ${size} MB in $out (Python $pyver)"
if (( size >= 60 )); then
    echo "make_wheelhouse: $out is ${size} MB, over the 60 MB a GPU node is expected to take" >&2
    exit 1
fi
