#!/usr/bin/env bash
# The package check (ctest `package_check`, so CI runs it): builds the .deb from the build tree,
# checks what it declares and carries, unpacks it into an empty root and runs the programs from
# there in a mount namespace where the source and build trees, the per-user LibTorch cache and
# /usr/local are empty: what runs can only have come from the package or from Debian.
#   scripts/check_package.sh [--build-dir DIR] [--keep DIR] [--deb FILE]
# --keep DIR leaves the .deb it built in DIR; --deb FILE checks that package instead of building
# one (it must come from the same build: its version, and its programs' build ids, are compared
# with the build's), so --keep has no meaning beside it.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$repo_root/build"
keep=""
given_deb=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$(cd "$2" && pwd)"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --deb) given_deb="$(readlink -f "$2")"; shift 2 ;;
    *) echo "check_package: unknown argument '$1' (--build-dir DIR, --keep DIR, --deb FILE)" >&2
       exit 2 ;;
  esac
done
fail() { echo "check_package: FAILED: $*" >&2; exit 1; }
if [ -n "$keep" ] && [ -n "$given_deb" ]; then
  echo "check_package: --keep keeps a package this check builds; with --deb there is none" >&2
  exit 2
fi
step() { echo "[check_package] $1 (${SECONDS}s)"; }

work="$(mktemp -d "${TMPDIR:-/tmp}/rematlab-package-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
case "$work/" in
  "$repo_root"/* | "$build_dir"/*) fail "TMPDIR lies inside the trees the check hides" ;;
esac

if [ -n "$given_deb" ]; then
  deb="$given_deb"
else
  step "building the package"
  deb="$(bash "$repo_root/packaging/build-deb.sh" --build-dir "$build_dir" --output "$work" --fast |
    tail -n 1)"
fi
[ -f "$deb" ] || fail "no package to check"
echo "  $(basename "$deb"): $(du -m "$deb" | cut -f1) MiB"

step "checking what it declares"
field() { dpkg-deb --field "$deb" "$1"; }
package="$(field Package)"
expected_version="$(sed -n 's/^REMATLAB_VERSION="\(.*\)"$/\1/p' "$build_dir/packaging/package.env")"
[ "$(field Version)" = "$expected_version" ] ||
  fail "the package's Version is $(field Version), the build's $expected_version"
depends="$(field Depends)"
for library in libc6 libsqlite3-0 libqt6widgets6 libqcustomplot2.1-qt6; do
  grep -qE "(^|, )$library( |,|$)" <<<"$depends" || fail "Depends lacks $library: $depends"
done

step "unpacking into an empty root"
root="$work/root"
mkdir "$root"
dpkg-deb --extract "$deb" "$root"
# The linker's build id survives the install's run-path rewrite: a package of this very build
# carries programs with the build's ids.
build_id() { readelf -n "$1" 2>/dev/null | sed -n 's/.*Build ID: //p'; }
for program in rematlab-cli rematlab; do
  built="$build_dir/app/$program"
  [ -f "$built" ] || continue
  [ -n "$(build_id "$built")" ] || fail "$built has no build id to compare"
  [ "$(build_id "$root/usr/bin/$program")" = "$(build_id "$built")" ] ||
    fail "the package's $program is not the one in $build_dir (build ids differ)"
done
doc="$root/usr/share/doc/$package"
for file in usr/bin/rematlab usr/bin/rematlab-cli \
            usr/share/applications/org.rematlab.rematlab.desktop \
            usr/share/metainfo/org.rematlab.rematlab.metainfo.xml \
            usr/share/icons/hicolor/scalable/apps/rematlab.svg \
            usr/share/man/man1/rematlab-cli.1.gz usr/share/man/man1/rematlab.1.gz \
            usr/lib/rematlab/libtorch_cpu.so; do
  [ -f "$root/$file" ] || fail "the package lacks /$file"
done
for size in 16 24 32 48 64 128 256; do
  png="$root/usr/share/icons/hicolor/${size}x${size}/apps/rematlab.png"
  file "$png" | grep -q "PNG image data, $size x $size" || fail "no ${size}px icon: $png"
done
grep -qx "License: GPL-3.0-or-later" "$doc/copyright" || fail "$doc/copyright: no GPL-3.0-or-later"
for library in "$root"/usr/lib/rematlab/*; do
  grep -qF "usr/lib/rematlab/$(basename "$library")" "$doc/copyright" ||
    fail "$doc/copyright does not name $(basename "$library")"
done
desktop-file-validate "$root/usr/share/applications/org.rematlab.rematlab.desktop" ||
  fail "the .desktop file does not validate"
appstreamcli validate --no-net "$root/usr/share/metainfo/org.rematlab.rematlab.metainfo.xml" ||
  fail "the AppStream metainfo does not validate"
grep -q "<release version=\"$expected_version\"" \
  "$root/usr/share/metainfo/org.rematlab.rematlab.metainfo.xml" ||
  fail "the metainfo has no <release> for version $expected_version"
for page in rematlab-cli rematlab; do
  warnings="$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$root/usr/share/man/man1/$page.1.gz" \
              2>&1 >/dev/null)"
  [ -z "$warnings" ] || fail "man page $page: $warnings"
done
zgrep -q -- '--checkpoint' "$root/usr/share/man/man1/rematlab-cli.1.gz" ||
  fail "rematlab-cli.1 does not document --checkpoint"

step "running it from there with the trees and caches out of reach"
# Everything that could lend the programs a library is covered with an empty tmpfs: the source
# and build trees, the LibTorch cache .venv points at (and the cache folder above it), and
# /usr/local (this machine's CUDA toolkit is listed in ld.so.conf from there).
torch_cache="$(readlink -f "$repo_root/.venv" || true)"
cache_home="${XDG_CACHE_HOME:-$HOME/.cache}/rematlab"
hidden=("$repo_root" "$build_dir" /usr/local)
for dir in "$torch_cache" "$cache_home"; do [ -d "$dir" ] && hidden+=("$dir"); done
cat >"$work/inside.sh" <<'EOF'
set -euo pipefail
root="$1"; work="$2"; version="$3"; shift 3
fail() { echo "check_package: FAILED: $*" >&2; exit 1; }
for dir in "$@"; do  # one inside a folder hidden before it is gone already
  if [ -d "$dir" ]; then mount -t tmpfs -o size=1m,mode=0755 rematlab-hidden "$dir"; fi
done
for dir in "$@"; do
  [ ! -d "$dir" ] || [ -z "$(ls -A "$dir")" ] || fail "$dir is still visible"
done
# Fails unless every library path given lies in the unpacked root or belongs to an installed
# Debian package. One dpkg query for all: it asks for each path as given, resolved, and without
# /usr (Debian 12 merges /lib into /usr/lib, but packages still list /lib paths).
require_packaged_or_debian() {
  local what="$1" path canonical; shift
  local outside=() forms=()
  for path in "$@"; do
    case "$path" in "$root"/*) continue ;; esac
    canonical="$(readlink -f "$path")"
    outside+=("$path")
    forms+=("$path" "$canonical" "${canonical#/usr}")
  done
  [ ${#outside[@]} -gt 0 ] || return 0
  local owned
  owned="$(dpkg-query --search "${forms[@]}" 2>/dev/null | sed -n 's/^.*: //p' | sort -u || true)"
  for path in "${outside[@]}"; do
    canonical="$(readlink -f "$path")"
    grep -qxF -e "$path" -e "$canonical" -e "${canonical#/usr}" <<<"$owned" ||
      fail "$what $path, neither packaged nor Debian's"
  done
}
for program in "$root/usr/bin/rematlab-cli" "$root/usr/bin/rematlab"; do
  resolved="$(ldd "$program")"
  if grep -q "not found" <<<"$resolved"; then
    fail "$program: $(grep "not found" <<<"$resolved")"
  fi
  # shellcheck disable=SC2046
  require_packaged_or_debian "$program loads" $(awk '$2 == "=>" { print $3 }' <<<"$resolved")
done
echo "  ldd: both programs resolve every library from the package or Debian"
cli="$root/usr/bin/rematlab-cli"
"$cli" version >"$work/version.txt" || fail "rematlab-cli version failed"
head -n 1 "$work/version.txt" | grep -qx "rematlab-cli $version" ||
  fail "rematlab-cli version says '$(head -n 1 "$work/version.txt")', not $version"
sed 's/^/  /' "$work/version.txt"
gui_version="$(QT_QPA_PLATFORM=offscreen "$root/usr/bin/rematlab" --version)" ||
  fail "rematlab --version failed"
[ "$gui_version" = "RematLab $version" ] || fail "rematlab --version says '$gui_version'"
echo "  rematlab --version: $gui_version"
# A 3-step tiny run; LD_DEBUG logs the path of every library the loader initialises, those opened
# with dlopen included.
LD_DEBUG=libs LD_DEBUG_OUTPUT="$work/ld" "$cli" run --preset tiny --steps 3 \
  --db "$work/check.sqlite" --json >"$work/run.txt" 2>"$work/run.err" ||
  fail "the tiny run failed: $(tail -n 3 "$work/run.err")"
summary="$(tail -n 1 "$work/run.txt")"
grep -q '"status":"ok"' <<<"$summary" || fail "the tiny run did not end ok: $summary"
grep -q '"steps_completed":3' <<<"$summary" || fail "the tiny run did not do 3 steps: $summary"
echo "  tiny run, 3 steps: $(grep -o '"status":"ok"' <<<"$summary")"
mapped="$(sed -n 's/.*calling init: \(\/.*\)$/\1/p' "$work"/ld.* | sort -u)"
[ -n "$mapped" ] || fail "LD_DEBUG logged no library"
# shellcheck disable=SC2086
require_packaged_or_debian "the run mapped" $mapped
echo "  LD_DEBUG: the run mapped $(wc -l <<<"$mapped") libraries, all packaged or Debian's"
EOF
mkdir -m 0700 "$work/runtime"
# Root (CI) needs only a mount namespace; anyone else maps themselves to root in a user namespace.
namespace=(--mount)
[ "$(id -u)" -eq 0 ] || namespace=(--map-root-user --mount)
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  HOME="$work/home" XDG_RUNTIME_DIR="$work/runtime" \
  unshare "${namespace[@]}" \
  bash "$work/inside.sh" "$root" "$work" "$expected_version" "${hidden[@]}"

if [ -n "$keep" ] && [ -z "$given_deb" ]; then
  mkdir -p "$keep"
  mv "$deb" "$keep/"
fi
step "passed"
