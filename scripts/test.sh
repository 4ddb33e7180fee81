#!/usr/bin/env bash
# Run the test suite (JAX on XLA is the oracle for every numerical test).
#   bash scripts/test.sh             the whole suite on the CPU, then the device leg on CL (OpenCL through POCL)
#                                    and on WEBGPU (Dawn on Mesa's lavapipe); installs those runtimes
#   bash scripts/test.sh ARGS...     one pytest run with ARGS (e.g. --device CL tests/backends)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" test,webgpu
# the devices the device leg runs on, for a machine without a GPU (docs/devices.md); a browser for the exported
# WebGPU page (docs/export.md)
apt_install pocl-opencl-icd ocl-icd-libopencl1 mesa-vulkan-drivers libvulkan1 chromium

pytest=(.venv/bin/python -m pytest -n 2 -p no:cacheprovider)
if [ $# -gt 0 ]; then
  exec "${pytest[@]}" "$@"
fi
status=0
"${pytest[@]}" --device CPU || status=1
for device in CL WEBGPU; do
  echo "device leg: $device" >&2
  "${pytest[@]}" --device "$device" -m device || status=1
done
exit $status
