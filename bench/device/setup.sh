# Sourced at the start of a run on a GPU host without a network (`. bench/device/setup.sh`): installs the
# packages its python3 (3.12, torch/triton/cupy present) lacks from wheels carried in .whl/ (git-ignored),
# then puts the repo first on PYTHONPATH and prints the GPU and the versions. Fetch the wheels here with
#   P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .whl \
#      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
#   pip download $P gymnasium farama-notifications cloudpickle pytest-timeout cuda-bindings cuda-pathfinder \
#       platformdirs msgpack jsonschema referencing rpds-py jsonschema-specifications attrs RestrictedPython pyseccomp
#   pip download $P --platform any liger-kernel flash-linear-attention fla-core torchao einops   # the [baselines] extra
# and Ray, whose wheel is over a carry's 64 MiB, as a trimmed tar.xz of its unpacked wheel without
# ray/jars and ray/rllib (31 MB): .whl/ray-<version>-site.tar.xz.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install from .whl/ failed"; exit 1; }
for t in .whl/*.tar.xz; do [ -e "$t" ] && tar xJf "$t" -C /tmp/site; done
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"
