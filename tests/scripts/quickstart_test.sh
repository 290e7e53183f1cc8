#!/usr/bin/env bash
# The README's main command, as a user runs it: scripts/quickstart sets up, builds
# (a no-op after the test build) and runs examples/quickstart.yaml with
# `orrery run`. Checks the report: every task completed and its loss fell.
set -euo pipefail
root=$1
cd "$root"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! scripts/quickstart --progress plain >"$log" 2>&1; then
  tail -n 40 "$log"
  echo "FAIL: scripts/quickstart exited non-zero"
  exit 1
fi
report=build/quickstart/report.json
fail() { echo "FAIL: $*"; tail -n 20 "$log"; exit 1; }
grep -q "all tasks completed" "$log" || fail "no completion line"
[ -s build/quickstart/report.html ] || fail "no report.html"
[ "$(jq -r .outcome "$report")" = completed ] || fail "outcome $(jq -r .outcome "$report")"
[ "$(jq '.tasks | length' "$report")" = 3 ] || fail "expected 3 tasks"
[ "$(jq '[.tasks[] | select(.state == "completed")] | length' "$report")" = 3 ] || fail "not all completed"
# Loss visibly falls: the last reported loss is below 80% of the first, for every task.
falling=$(jq '[.tasks[] | (.losses[-1].loss < 0.8 * .losses[0].loss)] | all' "$report")
[ "$falling" = true ] || fail "a task's loss did not fall: $(jq -c '[.tasks[] | [.losses[0].loss, .losses[-1].loss]]' "$report")"
echo "quickstart: $(grep 'all tasks completed' "$log")"
