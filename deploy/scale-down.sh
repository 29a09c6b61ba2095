#!/usr/bin/env bash
# Stop the local Celery workers deploy/scale-up.sh started, keeping the first K: `deploy/scale-down.sh [K]` (0: all).
#
# Each worker gets SIGTERM (a warm shutdown: it finishes the step it is running, takes no new one). One still
# running after SIM_PIPELINE_WORKER_STOP_TIMEOUT seconds is killed with its process group; its step's message was
# not acknowledged (task_acks_late), so RabbitMQ hands it to another worker as soon as the worker's connection closes.
# Only processes named by the pid files in $SIM_PIPELINE_WORKER_DIR are signalled, and only if they are Celery.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT_STOP_TIMEOUT_S=120  # a step of a nightly run usually ends within two minutes; longer ones are cut off

KEEP="${1:-0}"
DIR="${SIM_PIPELINE_WORKER_DIR:-$REPO/.celery_workers}"
STOP_TIMEOUT_S="${SIM_PIPELINE_WORKER_STOP_TIMEOUT:-$DEFAULT_STOP_TIMEOUT_S}"
if ! [[ "$KEEP" =~ ^[0-9]+$ ]]; then
  echo "scale-down: K must be a whole number, got '$KEEP'. Fix: deploy/scale-down.sh 0" >&2
  exit 2
fi

is_worker() {  # is_worker PID: a running Celery process (not a pid recycled by another program)
  kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q celery
}

exited() {  # exited PID: gone, or a zombie (exited; reaped only when init gets to it)
  ! kill -0 "$1" 2>/dev/null || [[ "$(sed -E 's/.*\) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" == Z ]]
}

stopping=()
shopt -s nullglob
for pidfile in "$DIR"/w*.pid; do
  index="$(basename "$pidfile" .pid)"
  index="${index#w}"
  [[ "$index" =~ ^[0-9]+$ ]] && ((index > KEEP)) || continue
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if [[ "$pid" =~ ^[0-9]+$ ]] && is_worker "$pid"; then
    kill -TERM "$pid"
    stopping+=("$index:$pid")
    echo "worker sim-w$index: stopping (pid $pid)"
  else
    rm -f "$pidfile"  # stale: the worker is gone already
  fi
done

deadline=$((SECONDS + STOP_TIMEOUT_S))
for entry in ${stopping[@]+"${stopping[@]}"}; do
  index="${entry%%:*}"
  pid="${entry#*:}"
  while ! exited "$pid" && ((SECONDS < deadline)); do
    sleep 0.5
  done
  if ! exited "$pid"; then
    # Celery detached into a session of its own, so its process group holds the worker and its pool, nothing else.
    group="$(ps -o pgid= -p "$pid" | tr -d ' ')"
    echo "worker sim-w$index: still running after ${STOP_TIMEOUT_S}s; killing its process group $group" >&2
    kill -KILL -- "-$group" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/w$index.pid"
  echo "worker sim-w$index: stopped"
done
