#!/usr/bin/env bash
# Fails (and names the files) when a C++ source differs from what .clang-format makes of it.
# Run by ctest as `format_check`, so CI checks it with every test run. `--fix` rewrites instead.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "clang-format is not installed" >&2; exit 1; }
mapfile -t sources < <(find app core ui tests bench -name '*.cpp' -o -name '*.h' | sort)
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${sources[@]}"
  exit 0
fi
unformatted=()
for source in "${sources[@]}"; do
  clang-format --dry-run --Werror "$source" >/dev/null 2>&1 || unformatted+=("$source")
done
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "not formatted (run scripts/check_format.sh --fix): ${unformatted[*]}" >&2
  exit 1
fi
echo "${#sources[@]} files formatted as .clang-format says"
