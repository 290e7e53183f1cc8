#!/usr/bin/env bash
# A missing tool gives one line that says what to do, not a wall of output:
#  - e2e/cluster with an empty tool cache points at scripts/setup;
#  - scripts/setup without Go says to install Go;
#  - scripts/setup with an unknown command says which arguments exist.
# Hermetic: no network, an empty cache folder of its own.
set -u
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # NAME EXPECTED_SUBSTRING OUTPUT STATUS
  local name=$1 want=$2 out=$3 status=$4
  local lines
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [ "$status" -eq 0 ]; then echo "FAIL $name: exit status 0"; fails=$((fails + 1)); return; fi
  if [ "$lines" -ne 1 ]; then echo "FAIL $name: $lines lines of output:"; printf '%s\n' "$out"; fails=$((fails + 1)); return; fi
  case "$out" in
    *"$want"*) echo "ok   $name: $out" ;;
    *) echo "FAIL $name: expected '$want' in: $out"; fails=$((fails + 1)) ;;
  esac
}

out=$(ORRERY_CACHE="$tmp/cache" ORRERY_CLUSTER_DIR="$tmp/plane" "$src/e2e/cluster" up 2>&1); st=$?
check "cluster-without-tools" "run scripts/setup" "$out" $st
[ -e "$tmp/plane/pids" ] && { echo "FAIL cluster-without-tools left state behind"; fails=$((fails + 1)); }

mkdir -p "$tmp/bin"
for t in bash dirname sed grep awk sort cat id mkdir rm ln; do ln -s "$(command -v $t)" "$tmp/bin/$t"; done
out=$(PATH="$tmp/bin" ORRERY_CACHE="$tmp/cache" "$src/scripts/setup" --tools 2>&1); st=$?
check "setup-without-go" "go not found" "$out" $st

out=$("$src/scripts/setup" --bogus 2>&1); st=$?
check "setup-bad-argument" "unknown argument" "$out" $st

out=$("$src/e2e/cluster" frobnicate 2>&1); st=$?
check "cluster-bad-command" "unknown command" "$out" $st

# Missing packages are found and installed, even when dpkg-query fails because it
# knows none of them (a fresh machine): a fake dpkg-query and apt-get stand in.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\nexit 1\n' >"$tmp/fakebin/dpkg-query"
printf '#!/bin/sh\necho "$@" >>"%s/apt-args"\n' "$tmp" >"$tmp/fakebin/apt-get"
chmod +x "$tmp/fakebin/dpkg-query" "$tmp/fakebin/apt-get"
if [ "$(id -u)" -eq 0 ]; then
  out=$(PATH="$tmp/fakebin:$PATH" ORRERY_CACHE="$tmp/cache" "$src/scripts/setup" --packages 2>&1); st=$?
  wanted=$(grep -v '^\s*#' "$src/deps/debian-packages.txt" | awk 'NF' | wc -l)
  asked=$(grep -m1 'install' "$tmp/apt-args" 2>/dev/null | tr ' ' '\n' | grep -vE '^-|^install$' | grep -c .)
  if [ $st -eq 0 ] && [ "$asked" -eq "$wanted" ]; then
    echo "ok   setup-installs-missing: asked apt-get for all $wanted packages"
  else
    echo "FAIL setup-installs-missing: status $st, asked for $asked of $wanted packages: $out"
    fails=$((fails + 1))
  fi
fi

[ $fails -eq 0 ] && echo "all setup error checks passed"
exit $fails
