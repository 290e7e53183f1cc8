#!/usr/bin/env bash
# The images scripts/images builds, run the way their pods run them: as uid/gid
# 65532, with a read-only root filesystem, no capabilities, no privilege
# escalation, and only the volumes the pod spec gives (the chart's Deployment:
# an emptyDir at /tmp; a worker pod (operator/controller/gang.cc): emptyDirs at
# /tmp and /dev/shm, the kubelet's termination-log file, a checkpoint volume).
#  - the operator image: `orrery --help`, `orrery operator --help`, `orrery version`;
#  - the CPU worker image: `orrery-worker profile --device cpu` on a tiny model
#    (the profile JSON on stdout and in the termination message), and `train` with
#    its checkpoints written to a host folder mounted as the pod's volume;
#  - nothing writes outside its volumes: each run again with a writable root, and
#    `podman diff` must list no file the program changed;
#  - each image's configuration runs as 65532 and it holds no compiler.
# With --cuda-image (or ORRERY_IMAGES_CUDA=1), the CUDA worker image too, when built:
# the same checks on its CPU path, and --device cuda (with no GPU: exit 1 naming
# the fix; with one: the profile on "cuda").
# Skips (exit 77) without podman or without the images, saying how to get them,
# unless ORRERY_IMAGES_REQUIRED=1 (scripts/test sets it after building them).
#
#   tests/images/images_test.sh SOURCE_DIR
set -u
src=$1
missing() {
  if [ "${ORRERY_IMAGES_REQUIRED:-0}" = 1 ]; then echo "FAIL: $*"; exit 1; fi
  echo "SKIPPED: $*"; exit 77
}
command -v podman >/dev/null || missing "podman not found; scripts/setup installs it and scripts/images builds the images"
mapfile -t names < <("$src/scripts/images" --print)
operator=${names[0]} worker=${names[1]} cuda_worker=${names[2]}
for image in "$operator" "$worker"; do
  podman image exists "$image" || missing "image $image not built; run scripts/images"
done

tmp=$(mktemp -d)
containers=()
cleanup() {
  for c in "${containers[@]}"; do podman rm -f "$c" >/dev/null 2>&1; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# The restricted pod security context as podman flags: the pod's user and group,
# no capabilities, no privilege escalation, host network (the node agent's), and
# no tmpfs that podman would add on its own to a read-only container.
pod_flags=(--network host --user 65532:65532 --cap-drop ALL --security-opt no-new-privileges
           --read-only-tmpfs=false)

# run NAME ROOT(ro|rw) IMAGE PODMAN_FLAGS... -- ARGS...: runs one container to its
# end; sets out (stdout and stderr), status, and diff (podman diff: what it
# changed in its root filesystem; always empty for ro).
run() {
  local name=$1 root=$2 image=$3; shift 3
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  local c="orrery-images-test-$$-$name-$root"
  containers+=("$c")
  local ro=()
  [ "$root" = ro ] && ro=(--read-only)
  podman create --name "$c" "${pod_flags[@]}" "${ro[@]}" "${flags[@]}" "$image" "$@" >/dev/null 2>"$tmp/create.err" ||
    { out="podman create failed: $(cat "$tmp/create.err")"; status=125; diff=""; return; }
  out=$(timeout 300 podman start --attach "$c" 2>&1)
  status=$(podman inspect --format '{{.State.ExitCode}}' "$c")
  # podman's own files (/etc/hosts, /etc/hostname, /etc/resolv.conf,
  # /run/.containerenv and the mount points it makes) are bind mounts or its doing,
  # not the program's; everything else is a write outside the volumes.
  diff=$(podman diff "$c" 2>&1 | grep -vE '^[ACD] /(etc|etc/(hosts|hostname|resolv\.conf)|run|run/\.containerenv|run/secrets|dev|dev/shm|dev/termination-log|tmp|checkpoints|proc|sys)$' || true)
  podman rm -f "$c" >/dev/null 2>&1
}

expect() { # NAME WANT_STATUS WANT_SUBSTRING
  local name=$1 want_status=$2 want=$3
  if [ "$status" != "$want_status" ]; then
    fail "$name: exit $status, want $want_status: $(printf '%s' "$out" | tail -n 5)"
  elif [[ "$out" != *"$want"* ]]; then
    fail "$name: no '$want' in: $(printf '%s' "$out" | tail -n 5)"
  else
    ok "$name"
  fi
}

no_writes() { # NAME
  if [ -n "$diff" ]; then fail "$1 wrote outside its volumes: $(printf '%s ' $diff)"; else ok "$1 writes only to its volumes"; fi
}

with_cuda=0
if [ "${ORRERY_IMAGES_CUDA:-0}" = 1 ] || [ "${2:-}" = --cuda-image ]; then
  if podman image exists "$cuda_worker"; then with_cuda=1; else echo "SKIPPED: $cuda_worker not built (scripts/images --cuda)"; fi
fi
configured=("$operator" "$worker")
[ $with_cuda -eq 1 ] && configured+=("$cuda_worker")

# Each image's own configuration: non-root by default, what a pod without a
# securityContext would run as.
for image in "${configured[@]}"; do
  user=$(podman image inspect --format '{{.Config.User}}' "$image")
  [ "$user" = 65532:65532 ] && ok "$image runs as 65532:65532" || fail "$image runs as '$user', want 65532:65532"
  out=$(podman run --rm --network host --entrypoint /bin/sh "$image" -c \
    'for t in cc gcc g++ c++ cmake ninja ld; do command -v $t; done; ls -d /usr/include/torch /usr/include/c++ 2>/dev/null' 2>&1)
  [ -z "$out" ] && ok "$image holds no toolchain" || fail "$image holds build tools: $(printf '%s ' $out)"
  echo "     $image: $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')"
done

# The operator: the chart's Deployment gives it an emptyDir at /tmp.
operator_volumes=(--tmpfs /tmp:rw,mode=1777)
for root in ro rw; do
  run help "$root" "$operator" "${operator_volumes[@]}" -- --help
  [ "$root" = ro ] && expect "orrery --help (read-only root, uid 65532)" 0 "Usage: orrery COMMAND"
  [ "$root" = rw ] && no_writes "orrery --help"
  run operator-help "$root" "$operator" "${operator_volumes[@]}" -- operator --help
  [ "$root" = ro ] && expect "orrery operator --help (read-only root, uid 65532)" 0 "Usage: orrery operator"
  [ "$root" = rw ] && no_writes "orrery operator --help"
  run version "$root" "$operator" "${operator_volumes[@]}" -- version
  [ "$root" = ro ] && expect "orrery version (read-only root, uid 65532)" 0 "0."
  [ "$root" = rw ] && no_writes "orrery version"
done

# A worker: emptyDirs at /tmp and /dev/shm, the termination-log file the kubelet
# mounts, TMPDIR and the message path in its environment, the checkpoint volume
# (a host folder the pod's fsGroup makes writable: here owned by 65532).
worker_pod() { # IMAGE ROOT NAME ARGS...
  local image=$1 root=$2 name=$3; shift 3
  : >"$tmp/termination-log-$name-$root"
  chmod 666 "$tmp/termination-log-$name-$root"
  mkdir -p "$tmp/checkpoints-$name-$root"
  chown 65532:65532 "$tmp/checkpoints-$name-$root" 2>/dev/null || chmod 777 "$tmp/checkpoints-$name-$root"
  run "$name" "$root" "$image" --tmpfs /tmp:rw,mode=1777 --tmpfs /dev/shm:rw,mode=1777,size=64m \
    -v "$tmp/termination-log-$name-$root:/dev/termination-log" \
    -v "$tmp/checkpoints-$name-$root:/checkpoints" \
    -e TMPDIR=/tmp -e ORRERY_TERMINATION_MESSAGE_PATH=/dev/termination-log -- "$@"
}
tiny=(--model mlp --mlp-input 8 --mlp-hidden 16 --mlp-layers 2 --classes 4 --batch 8 --template single)

check_worker() { # IMAGE LABEL
  local image=$1 label=$2
  for root in ro rw; do
    worker_pod "$image" "$root" profile profile --device cpu "${tiny[@]}" --profile-warmup 1 --profile-steps 2
    if [ "$root" = ro ]; then
      expect "$label profile --device cpu (read-only root, uid 65532)" 0 '"event":"profile"'
      grep -q '"event":"profile"' "$tmp/termination-log-profile-ro" &&
        ok "$label profile wrote its termination message" ||
        fail "$label profile left no profile in its termination message: $(head -c 300 "$tmp/termination-log-profile-ro")"
    else
      no_writes "$label profile"
    fi
    worker_pod "$image" "$root" train train --device cpu "${tiny[@]}" --data synthetic --steps 4 \
      --checkpoint-dir /checkpoints/task --checkpoint-every 2
    if [ "$root" = ro ]; then
      expect "$label train with checkpoints on the volume (read-only root, uid 65532)" 0 '"status":"completed"'
      if [ -f "$tmp/checkpoints-train-ro/task/step-000000000004/metadata.json" ]; then
        ok "$label train's checkpoint is on the volume, owned by $(stat -c %u:%g "$tmp/checkpoints-train-ro/task/step-000000000004/metadata.json")"
      else
        fail "$label train left no checkpoint on the volume: $(find "$tmp/checkpoints-train-ro" | head -n 5 | tr '\n' ' ')"
      fi
    else
      no_writes "$label train"
    fi
  done
}
check_worker "$worker" "orrery-worker (CPU)"

if [ $with_cuda -eq 1 ]; then
  # The CUDA build's CPU path, which a rank without a GPU runs; without a GPU,
  # --device cuda must fail (exit 1) naming the missing device and the fix.
  check_worker "$cuda_worker" "orrery-worker (CUDA build)"
  worker_pod "$cuda_worker" ro device-cuda profile --device cuda "${tiny[@]}" --profile-warmup 1 --profile-steps 2
  if [ "$status" = 0 ]; then
    expect "orrery-worker (CUDA build) profile --device cuda on a GPU" 0 '"device":"cuda"'
  else
    expect "orrery-worker (CUDA build) --device cuda without a GPU says so" 1 "run with --device cpu"
  fi
fi

[ $fails -eq 0 ] && echo "images: all checks passed" || echo "images: $fails checks failed"
[ $fails -eq 0 ]
