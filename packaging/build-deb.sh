#!/usr/bin/env bash
# Makes RematLab's Debian package from a built tree: `cmake --install` into an empty root, the
# LibTorch libraries that the programs load added under /usr/lib/rematlab (the programs' run path
# is $ORIGIN/../lib/rematlab), Depends computed by dpkg-shlibdeps (Qt 6, QCustomPlot, SQLite and
# the C/C++ runtimes come from Debian), then dpkg-deb.
#
#   packaging/build-deb.sh [--build-dir DIR] [--output DIR] [--fast]
#
# A build that links LibTorch's CUDA part (the default) makes `rematlab`, which carries the NVIDIA
# libraries too; one configured with -DREMATLAB_WITH_CUDA=OFF makes the much smaller
# `rematlab-cpu`, for machines without an NVIDIA GPU. --fast compresses with zstd -1 (seconds,
# for the CI check) instead of dpkg-deb's default xz -6 (minutes, a smaller file). Prints the
# path of the .deb as its last line. REMATLAB_MAINTAINER sets the Maintainer field, and
# SOURCE_DATE_EPOCH the changelog's date.
set -euo pipefail
umask 022

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$repo_root/build"
output_dir=""
compression=(-Zxz -z6)
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$(cd "$2" && pwd)"; shift 2 ;;
    --output) output_dir="$2"; shift 2 ;;
    --fast) compression=(-Zzstd -z1); shift ;;
    *) echo "build-deb: unknown argument '$1' (--build-dir DIR, --output DIR, --fast)" >&2
       exit 2 ;;
  esac
done
output_dir="${output_dir:-$build_dir/deb}"
maintainer="${REMATLAB_MAINTAINER:-RematLab developers <rematlab@users.noreply.invalid>}"
log() { echo "[build-deb] $* (${SECONDS}s)" >&2; }

# What the build knows: version, where its LibTorch lives (packaging/CMakeLists.txt writes it).
package_env="$build_dir/packaging/package.env"
if [ ! -f "$package_env" ]; then
  echo "build-deb: $package_env missing: configure and build first" >&2
  exit 2
fi
# shellcheck source=/dev/null
source "$package_env"
[ -x "$build_dir/app/rematlab-cli" ] || { echo "build-deb: build $build_dir first" >&2; exit 2; }

stage="$(mktemp -d "${TMPDIR:-/tmp}/rematlab-deb.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
mkdir -p "$root/DEBIAN"

log "installing the build into the package root"
cmake --install "$build_dir" --prefix "$root/usr" --strip >/dev/null
programs=("$root"/usr/bin/*)

# The libraries to carry: every library a program or a carried library names (DT_NEEDED) that the
# pinned LibTorch provides, found in its lib folder or the NVIDIA wheels' lib folders beside it;
# whatever else they name is Debian's (dpkg-shlibdeps below turns it into Depends). A build that
# links libtorch_cuda also gets what LibTorch and cuDNN open with dlopen on a GPU, which no
# DT_NEEDED names: cuDNN's sub-libraries, NVRTC and its builtins (kernels compiled at run time),
# and the linear-algebra part that LibTorch loads on first use.
log "carrying the LibTorch libraries the programs load"
wheel_dirs=("$REMATLAB_TORCH_LIB_DIR")
for dir in "$REMATLAB_TORCH_LIB_DIR"/../../nvidia/*/lib; do
  [ -d "$dir" ] && wheel_dirs+=("$(cd "$dir" && pwd)")
done
carried="$root/usr/lib/rematlab"
mkdir -p "$carried"
declare -A seen=()
queue=("${programs[@]}")
carry() {  # carry NAME: copy it from the wheels (once) and queue it for its own DT_NEEDED
  local name="$1" dir
  [ -n "${seen[$name]:-}" ] && return 0
  seen[$name]=1
  for dir in "${wheel_dirs[@]}"; do
    if [ -f "$dir/$name" ]; then
      # Libraries are not executable in a Debian package: LibTorch's (0755 in its wheel, 1 GB)
      # are copied and made 0644; the NVIDIA wheels' (0644 already, 2.3 GB) are hard-linked where
      # they share the file system. Nothing may change a carried file in place then, or it would
      # change the wheel's too.
      if [ -x "$dir/$name" ] || ! cp -L --link "$dir/$name" "$carried/$name" 2>/dev/null; then
        cp -L "$dir/$name" "$carried/$name"
        chmod 0644 "$carried/$name"
      fi
      queue+=("$carried/$name")
      return 0
    fi
  done
}
while [ ${#queue[@]} -gt 0 ]; do
  file="${queue[0]}"
  queue=("${queue[@]:1}")
  for name in $(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do carry "$name"; done
  if [ "$(basename "$file")" = libtorch_cuda.so ]; then
    for dir in "${wheel_dirs[@]}"; do
      for opened in "$dir"/libcudnn_*.so.* "$dir"/libnvrtc.so.* "$dir"/libnvrtc-builtins.so.* \
                    "$dir"/libcaffe2_nvrtc.so "$dir"/libtorch_cuda_linalg.so; do
        [ -f "$opened" ] && carry "$(basename "$opened")"
      done
    done
  fi
done
[ -f "$carried/libtorch_cpu.so" ] ||
  { echo "build-deb: libtorch_cpu.so not found under $REMATLAB_TORCH_LIB_DIR" >&2; exit 1; }

if [ -f "$carried/libtorch_cuda.so" ]; then
  package=rematlab other=rematlab-cpu
  flavour=" This package carries LibTorch with its CUDA libraries: it trains on the CPU,
 and on an NVIDIA GPU where the NVIDIA driver (libcuda.so.1) is installed."
else
  package=rematlab-cpu other=rematlab
  flavour=" This package carries LibTorch's CPU part alone: it trains on the CPU. For an
 NVIDIA GPU, install the rematlab package instead."
fi

# Licences: RematLab's, and each carried library's as its wheel ships it.
doc="$root/usr/share/doc/$package"
mkdir -p "$doc"
if [ "$package" != rematlab ] && [ -d "$root/usr/share/doc/rematlab/examples" ]; then
  mv "$root/usr/share/doc/rematlab/examples" "$doc/examples"
  rmdir "$root/usr/share/doc/rematlab"
fi
cp "$repo_root/packaging/copyright" "$doc/copyright"
# A native package's changelog (Debian policy 12.7): this version, built from this tree.
built="$(date -R -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}")"
printf '%s (%s) unstable; urgency=medium\n\n  * %s\n\n -- %s  %s\n' "$package" \
  "$REMATLAB_VERSION" "Built by packaging/build-deb.sh; see the project's history for changes." \
  "$maintainer" "$built" | gzip -9n >"$doc/changelog.gz"
site_packages="$(cd "$REMATLAB_TORCH_LIB_DIR/../.." && pwd)"
declare -A distribution_files=()
for library in "$carried"/*; do
  name="$(basename "$library")"
  # grep finds nothing with status 1: under pipefail that would end the script without a word.
  record="$({ grep -l -E "/lib/$name," "$site_packages"/*.dist-info/RECORD || true; } | head -n 1)"
  [ -n "$record" ] || { echo "build-deb: no wheel lists $name" >&2; exit 1; }
  distribution_files[$(dirname "$record")]+=" usr/lib/rematlab/$name"
done
for dist_info in $(printf '%s\n' "${!distribution_files[@]}" | sort); do
  distribution="$(basename "$dist_info" .dist-info)"
  licence="$(sed -n -E 's/^License(-Expression)?: (.*)/\2/p' "$dist_info/METADATA" | head -n 1)"
  mkdir -p "$doc/third-party/$distribution"
  if [ -d "$dist_info/licenses" ]; then
    cp -r "$dist_info/licenses/." "$doc/third-party/$distribution/"
  fi
  cp "$dist_info/METADATA" "$doc/third-party/$distribution/METADATA"
  {
    echo
    echo "Files:${distribution_files[$dist_info]}"
    echo "Copyright: the authors of the $distribution wheel, as its METADATA and licence files say"
    echo "License: ${licence:-see the METADATA below}"
    echo " Carried unmodified from the $distribution wheel on PyPI; its licence files and"
    echo " METADATA are in /usr/share/doc/$package/third-party/$distribution/."
  } >>"$doc/copyright"
done

# Depends: what the programs need from Debian. The carried libraries need only the C and C++
# runtimes the programs need too; the package check loads everything from the unpacked root.
log "computing Depends with dpkg-shlibdeps"
mkdir -p "$stage/debian"
printf 'Source: rematlab\n\nPackage: %s\nArchitecture: any\n' "$package" >"$stage/debian/control"
ln -s ../root "$stage/debian/$package"
shlibdeps_programs=("${programs[@]/#$root/debian/$package}")
depends="$(cd "$stage" && dpkg-shlibdeps -O "${shlibdeps_programs[@]}" 2>"$stage/shlibdeps.log" |
  sed -n 's/^shlibs:Depends=//p')"
# It cannot read a version out of LibTorch's unversioned names (libc10.so), and it says the
# programs need no symbol of libtorch_cuda.so, which LibTorch links on purpose: not news.
grep -v -e "can't extract name and version" -e "useless dependency" "$stage/shlibdeps.log" >&2 ||
  true
[ -n "$depends" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

architecture="$(dpkg --print-architecture)"
installed_kib="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
cat >"$root/DEBIAN/control" <<EOF
Package: $package
Version: $REMATLAB_VERSION
Architecture: $architecture
Maintainer: $maintainer
Installed-Size: $installed_kib
Depends: $depends
Conflicts: $other
Replaces: $other
Section: science
Priority: optional
Description: activation-checkpointing workbench for LibTorch training
 RematLab trains a GPT-style model on an embedded LibTorch engine, applies the
 activation checkpointing policy you choose and measures peak memory,
 throughput and loss, with gradients checked against training without
 checkpointing. A Qt 6 window (rematlab) and a headless command
 (rematlab-cli) share one runs database.
 .
$flavour
EOF

mkdir -p "$output_dir"
deb="$output_dir/${package}_${REMATLAB_VERSION}_${architecture}.deb"
log "packing $package ($((installed_kib / 1024)) MiB installed) with ${compression[*]}"
dpkg-deb --root-owner-group "${compression[@]}" --build "$root" "$deb" >/dev/null
log "$(du -h "$deb" | cut -f1) $deb"
echo "$deb"
