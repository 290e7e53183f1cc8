#!/usr/bin/env bash
# Checks that every relative link in the repository's Markdown files points at a
# file or folder that exists. Usage: tests/docs/check_links.sh [REPO_ROOT]
#
# Files: every *.md git knows of or would add (tracked, or untracked and not
# ignored), outside build/ and build-*/. Links: inline [text](target) and
# ![alt](target), and reference definitions "[label]: target". Fenced code
# blocks and inline code spans are skipped. Not checked: URLs with a scheme
# (https:, mailto:, ...), pure anchors (#section), and the anchor part of a
# relative link. A target starting with / is read from the repository root, as
# GitHub does. A target that leaves the repository (../../elsewhere) is broken
# even when it exists on this machine: a clone does not have it.
# Exit 0 when every link resolves; else 1, listing each broken link as
# FILE:LINE: TARGET on stderr.
set -euo pipefail

root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "$root"
root_abs=$(pwd -P)

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.md' |
                       grep -Ev '^build(-[^/]*)?/' | sort -u)
else
  mapfile -t files < <(find . -name '*.md' -not -path './build/*' -not -path './build-*/*' \
                         -not -path './.git/*' | sed 's|^\./||' | sort)
fi

# Prints "LINE<TAB>TARGET" for every relative link of one Markdown file.
extract_links() {
  awk '
    /^[ \t]*(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    {
      line = $0
      # Reference definition: [label]: target
      if (match(line, /^[ \t]*\[[^]]+\]:[ \t]*[^ \t]+/)) {
        def = substr(line, RSTART, RLENGTH)
        sub(/^[ \t]*\[[^]]+\]:[ \t]*/, "", def)
        print NR "\t" def
        next
      }
      # Drop inline code spans so `a[i](j)` is not a link; a link whose text is
      # code, [`x`](y), keeps its "(y)".
      gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^)]*\)/)) {
        target = substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
        sub(/^[ \t]+/, "", target)
        sub(/[ \t].*$/, "", target)   # drop a "title"
        gsub(/^<|>$/, "", target)
        print NR "\t" target
      }
    }
  ' "$1"
}

broken=0
checked=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  dir=$(dirname "$f")
  while IFS=$'\t' read -r line target; do
    [ -n "$target" ] || continue
    case "$target" in
      \#*) continue ;;                                   # anchor in this file
    esac
    if [[ "$target" =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]]; then continue; fi  # URL
    path="${target%%#*}"
    path="${path%%\?*}"
    path="${path//%20/ }"
    [ -n "$path" ] || continue
    if [[ "$path" == /* ]]; then
      resolved=".${path}"
    else
      resolved="${dir}/${path}"
    fi
    checked=$((checked + 1))
    # Lexically (symlinks not followed): inside the repository and present.
    normal=$(realpath -m -s "$resolved")
    if [[ "$normal" != "$root_abs" && "$normal" != "$root_abs"/* ]] || [ ! -e "$resolved" ]; then
      echo "${f}:${line}: ${target}" >&2
      broken=$((broken + 1))
    fi
  done < <(extract_links "$f")
done

if [ "$broken" -gt 0 ]; then
  echo "check_links: ${broken} broken relative link(s) in ${#files[@]} Markdown files" >&2
  exit 1
fi
echo "check_links: ${checked} relative links in ${#files[@]} Markdown files, all resolve"
