#!/usr/bin/env bash
# Installs and checks everything cudaq-rt needs on Debian 12 / Ubuntu 24.04, then mends the
# pip-wheel CUDA layout so that `nvcc -dlto` device links find libnvvm. Idempotent. Run as root
# (or with sudo available); on a machine that already has everything it installs nothing.
set -euo pipefail

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
packages=(cmake ninja-build g++ libcli11-dev nlohmann-json3-dev doctest-dev llvm-14-dev libssl-dev
          libcurl4-openssl-dev libzstd-dev mandoc python3 python3-jsonschema clang-format binutils file zstd nginx
          openssl docker-registry skopeo apache2-utils make pkg-config)

# client.python and python.wheel pip-install python/ into a fresh venv, offline; the wheel carries
# the runtime and the libraries it needs, renamed (patchelf); python.package and python.mypy use
# numpy and mypy.
packages+=(python3-dev python3-venv python3-pip python3-setuptools python3-wheel patchelf python3-numpy mypy)
# scripts/test-sanitized.sh: the fuzz targets (clang's libFuzzer, ASan and UBSan runtimes).
packages+=(clang-14 libclang-rt-14-dev)
sudo_=""
if [ "$(id -u)" != 0 ]; then sudo_=sudo; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo_ apt-get update -qq
  $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi

die() { echo "setup: error: $*" >&2; exit 1; }
[ -x "$CUDA_HOME/bin/nvcc" ] || die "'$CUDA_HOME/bin/nvcc' not found: install the CUDA Toolkit 13 or set CUDA_HOME"
[ -e "$CUDA_HOME/lib64/libnvJitLink.so" ] || [ -e "$CUDA_HOME/lib/libnvJitLink.so" ] \
  || die "'$CUDA_HOME': libnvJitLink.so not found (the nvJitLink component of the CUDA Toolkit)"
command -v llvm-config-14 >/dev/null || die "llvm-config-14 not found after installing llvm-14-dev"
# integration.remote_cache serves the remote link cache with nginx's WebDAV PUT.
/usr/sbin/nginx -V 2>&1 | grep -q http_dav_module || die "nginx has no dav module (integration.remote_cache needs it)"
/usr/bin/python3 -c 'import jsonschema' || die "python3-jsonschema is not importable by /usr/bin/python3"
# client.python pip-installs python/ into a venv, offline: it builds the wheel with these.
/usr/bin/python3 -c 'import setuptools, wheel' \
  || die "python3-setuptools or python3-wheel is not importable by /usr/bin/python3"

# A pip-wheel CUDA layout keeps libnvvm in lib/, where nvlink's -dlto looks for it in nvvm/lib64/
# ("elfLink linker library load error" until it is there).
if [ ! -e "$CUDA_HOME/nvvm/lib64/libnvvm.so" ]; then
  for d in "$CUDA_HOME/lib" "$CUDA_HOME/lib64"; do
    if ls "$d"/libnvvm.so* >/dev/null 2>&1; then
      echo "setup: linking $CUDA_HOME/nvvm/lib64/libnvvm.so* to $d" >&2
      $sudo_ mkdir -p "$CUDA_HOME/nvvm/lib64"
      for f in "$d"/libnvvm.so*; do $sudo_ ln -sf "$f" "$CUDA_HOME/nvvm/lib64/$(basename "$f")"; done
      break
    fi
  done
fi
# Check the mend: a device link with LTO must work.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '__device__ int twice(int x) { return 2 * x; }\n__global__ void k(int *p) { *p = twice(*p); }\nint main() { return 0; }\n' >"$probe/p.cu"
"$CUDA_HOME/bin/nvcc" -rdc=true -dlto -arch=sm_80 "$probe/p.cu" -o "$probe/p" 2>"$probe/log" \
  || die "'nvcc -rdc=true -dlto' does not work here: $(head -c 300 "$probe/log")"
echo "setup: ok (CUDA $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), LLVM $(llvm-config-14 --version))" >&2
