#!/usr/bin/env bash
# Installs what gpud-cuda's CPU tests need and prints the lines that make NVRTC loadable:
#   eval "$(cuda/ci-setup.sh)"
# - g++ compiles the kernel headers as C++ for the arithmetic tests (Debian: build-essential).
# - NVRTC 13.0 from PyPI compiles every kernel to sm_90 CUBIN without a GPU. NVRTC loads its
#   builtins library by name, so its folder must be on LD_LIBRARY_PATH before the tests start.
set -euo pipefail
if ! command -v g++ >/dev/null 2>&1; then
    { apt-get update -qq && apt-get install -y -qq build-essential; } >&2
fi
wheel=nvidia-cuda-nvrtc==13.0.88
# Into python3's site-packages; where that is refused (an externally managed Python), into a
# folder of our own.
target="${XDG_CACHE_HOME:-$HOME/.cache}/gpud-cuda-nvrtc"
pip=(python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore)
if ! "${pip[@]}" "$wheel" >&2; then
    "${pip[@]}" --target "$target" "$wheel" >&2
fi
libdir=$(python3 - "$target" <<'PY'
import os, sys
roots = [os.path.join(sys.argv[1], "nvidia")]
try:
    import nvidia
    roots = list(nvidia.__path__) + roots
except ImportError:
    pass
for base in roots:
    d = os.path.join(base, "cu13", "lib")
    if os.path.exists(os.path.join(d, "libnvrtc.so.13")):
        print(d)
        break
PY
)
if [ -z "$libdir" ]; then
    echo "ci-setup: libnvrtc.so.13 not found after installing $wheel" >&2
    exit 1
fi
echo "export GPUD_NVRTC_LIB_DIR='$libdir'"
echo "export LD_LIBRARY_PATH='$libdir'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
