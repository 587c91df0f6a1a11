# Shared by the set-up scripts: install what is missing, configure, build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"

# Debian packages the build and tests need; only the missing ones are installed.
# nlohmann-json3-dev: every JSON; libcli11-dev: the programs' command lines; graphviz: the
# test that renders to_dot() output; zlib1g-dev: .npz files (CRC-32, deflate).
# libopenmpi-dev, openmpi-bin: data-parallel training (CONVGRAPH_WITH_MPI) and its tests.
# doxygen: the API reference (the `docs` target and its test).
# python3-numpy: the live check that numpy reads the .npy/.npz files convgraph writes.
PACKAGES=(g++ cmake ninja-build pkg-config libeigen3-dev catch2 qemu-user nlohmann-json3-dev libcli11-dev graphviz zlib1g-dev
  libopenmpi-dev openmpi-bin doxygen python3-numpy)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A fresh build directory is configured as a unity build (UNITY_BUILD=OFF to opt out):
# batches of sources compiled together parse the shared headers once, which halves the
# compile time of the library in a clean build (CI, the demo; the tests compile per file);
# the developer's incremental builds recompile
# a batch instead of a file.
configure_and_build() {
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_UNITY_BUILD="${UNITY_BUILD:-ON}" -DCONVGRAPH_WITH_CUDA="${CONVGRAPH_WITH_CUDA:-AUTO}" "$@"
  fi
  # BUILD_TARGETS (space-separated) builds only those targets.
  local targets=()
  for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" --parallel "$JOBS" "${targets[@]}"
}

# The sanitized build: clang with AddressSanitizer + UndefinedBehaviorSanitizer and the
# libFuzzer targets (CONVGRAPH_FUZZ). `scripts/test.sh --sanitize` runs the test suite in
# it and scripts/fuzz.sh the fuzzers, so CI compiles the library once for both. -O1 keeps
# the compile time about half of -O3's while the tests still run at a useful speed. The
# CPU kernels are compiled for this host's level only (CONVGRAPH_CPU_LEVELS=HOST, a third of
# their compile time): the normal build checks every level against the reference.
#
# On a host with AVX2 but without AVX-512 that level is the emulated one (CMake
# CONVGRAPH_EMULATE_AVX512: its code for AVX2, its intrinsics emulated) instead of the
# host's avx2: the normal build checks avx2 and baseline natively, and the AVX-512 level's
# code, which nothing else here can run, gets the sanitized suite. EMULATE_AVX512=ON or OFF
# overrides the choice (auto).
SANITIZE_BUILD_DIR="${SANITIZE_BUILD_DIR:-$ROOT/build-asan}"
CLANG_VERSION="${CLANG_VERSION:-14}"
build_sanitized() {  # [targets...] (none: everything)
  install_missing "clang-$CLANG_VERSION" "libclang-rt-$CLANG_VERSION-dev"
  local cxx emulate="${EMULATE_AVX512:-auto}"
  cxx="$(command -v "clang++-$CLANG_VERSION" || command -v clang++)"
  if [ "$emulate" = auto ]; then  # ON where AVX2 runs and any of the level's AVX-512 parts is missing
    emulate=OFF
    if grep -qsw avx2 /proc/cpuinfo; then
      for f in avx512f avx512bw avx512cd avx512dq avx512vl; do grep -qsw "$f" /proc/cpuinfo || emulate=ON; done
    fi
  fi
  # configure_and_build configures a new directory only: an existing one is switched here.
  local cache="$SANITIZE_BUILD_DIR/CMakeCache.txt"
  if [ -f "$cache" ] && ! grep -qx "CONVGRAPH_EMULATE_AVX512:BOOL=$emulate" "$cache"; then
    cmake -S "$ROOT" -B "$SANITIZE_BUILD_DIR" -DCONVGRAPH_EMULATE_AVX512="$emulate" >/dev/null
  fi
  BUILD_DIR="$SANITIZE_BUILD_DIR" CONVGRAPH_WITH_CUDA=OFF BUILD_TARGETS="$*" configure_and_build \
    -DCMAKE_CXX_COMPILER="$cxx" -DCONVGRAPH_FUZZ=ON -DCONVGRAPH_BUILD_EXAMPLES=OFF \
    -DCONVGRAPH_BUILD_BENCHMARKS=OFF -DCONVGRAPH_CPU_LEVELS=HOST "-DCMAKE_CXX_FLAGS_RELEASE=-O1" \
    -DCONVGRAPH_EMULATE_AVX512="$emulate"
}
