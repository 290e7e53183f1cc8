#!/bin/sh
# Builds data/corpus/quickstart.txt, the small real English corpus the quickstart
# trains on, from text every Debian system ships: the plain-text licences of
# base-files (/usr/share/common-licenses, an Essential package, so nothing to
# install and nothing downloaded). Deterministic: a fixed list of files in a fixed
# order, symlinked aliases skipped, line endings normalised.
#
# usage: data/build_corpus.sh [OUT]   (default: data/corpus/quickstart.txt)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/corpus/quickstart.txt"}
src=${ORRERY_CORPUS_SOURCE:-/usr/share/common-licenses}

files="GPL-3 LGPL-3 GPL-2 LGPL-2.1 LGPL-2 GPL-1 Apache-2.0 MPL-2.0 MPL-1.1 Artistic GFDL-1.3 GFDL-1.2 BSD CC0-1.0"

mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
: > "$tmp"
found=0
for f in $files; do
  p="$src/$f"
  [ -f "$p" ] || continue
  [ -L "$p" ] && continue
  found=$((found + 1))
  # Strip carriage returns and form feeds so the byte-level vocabulary stays small.
  tr -d '\r\f' < "$p" >> "$tmp"
  printf '\n' >> "$tmp"
done
if [ "$found" -lt 3 ]; then
  echo "build_corpus: found only $found licence texts under $src (is base-files installed?)" >&2
  exit 1
fi
mv "$tmp" "$out"
trap - EXIT
bytes=$(wc -c < "$out")
echo "build_corpus: wrote $out ($found texts, $bytes bytes)"
