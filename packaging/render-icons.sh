#!/usr/bin/env bash
# Renders resources/icons/rematlab.svg to the PNG sizes that the hicolor icon theme looks up
# (16 to 256 pixels). The PNGs are committed, so a build needs no SVG renderer; run this after
# changing the SVG. Needs rsvg-convert (Debian: librsvg2-bin).
set -euo pipefail
cd "$(dirname "$0")/../resources/icons"
if ! command -v rsvg-convert >/dev/null; then
  echo "render-icons: rsvg-convert is not installed (Debian: librsvg2-bin)" >&2
  exit 1
fi
for size in 16 24 32 48 64 128 256; do
  rsvg-convert --width "$size" --height "$size" rematlab.svg --output "rematlab-$size.png"
done
