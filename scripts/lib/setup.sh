# Sourced by scripts/run and scripts/test: installs what is missing, then configures and builds.
# Idempotent: a second call installs and downloads nothing.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TORCH_VERSION="2.11.0"  # the GPU validation machine runs PyTorch 2.11 too
BUILD_DIR="${REMATLAB_BUILD_DIR:-$REPO_ROOT/build}"

# strace: a test checks the CSV export's fsync; clang-format: the format check; util-linux
# (setpriv, unshare): tests that must see write protection as a user does, and the package check.
# help2man: the window's man page; dpkg-dev (dpkg-shlibdeps), appstream, desktop-file-utils,
# man-db and file: the package and the package check (scripts/check_package.sh). libgloo-dev: the
# gloo headers c10d's ProcessGroupGloo.hpp includes (the PyTorch wheel ships none). jq:
# scripts/calibrate-estimates.
APT_PACKAGES=(cmake ninja-build g++ pkg-config python3 python3-venv
              qt6-base-dev libqcustomplot-dev libsqlite3-dev nlohmann-json3-dev libcli11-dev
              libgtest-dev xvfb xauth strace clang-format util-linux
              help2man dpkg-dev appstream desktop-file-utils man-db file libgloo-dev jq)

log() { echo "[rematlab] $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_debian_packages() {
  local missing=()
  for package in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# The PyTorch wheel (LibTorch inside) lives in a per-user cache keyed by version and Python, so
# neither a second checkout nor CI downloads it again; .venv points at it.
install_torch() {
  local python_tag cache
  python_tag="$(python3 -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/rematlab/torch-${TORCH_VERSION}-${python_tag}"
  mkdir -p "$(dirname "$cache")"
  (
    flock 9  # two checkouts installing at once wait for each other
    if [ ! -f "$cache/.complete" ]; then
      log "installing PyTorch ${TORCH_VERSION} into $cache (once per machine)"
      rm -rf "$cache"
      python3 -m venv "$cache"
      "$cache/bin/python" -m pip install --quiet --disable-pip-version-check \
        "torch==${TORCH_VERSION}"
      touch "$cache/.complete"
    fi
  ) 9>"$cache.lock"
  ln -sfn "$cache" "$REPO_ROOT/.venv"
}

# Warnings are errors when REMATLAB_WERROR=ON (.ci/run sets it) or CI=true.
configure_and_build() {
  local prefix werror="${REMATLAB_WERROR:-OFF}"
  prefix="$("$REPO_ROOT/.venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  [ "${CI:-}" = "true" ] && werror=ON
  if [ ! -f "$BUILD_DIR/build.ninja" ] || [ "$werror" = "ON" ]; then
    cmake -S "$REPO_ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DREMATLAB_WERROR="$werror" -Wno-dev >/dev/null
  fi
  cmake --build "$BUILD_DIR" --parallel "$(nproc)"
}

setup_all() {
  install_debian_packages
  install_torch
  configure_and_build
}
