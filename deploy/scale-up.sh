#!/usr/bin/env bash
# Start local Celery workers for the Celery executor until N run: `deploy/scale-up.sh [N]`.
#
# Worker i is named sim-w<i>@<host>; its pid file (w<i>.pid) and log (w<i>.log) are in $SIM_PIPELINE_WORKER_DIR.
# A worker whose pid file names a live worker is kept, so `scale-up.sh 4` after `scale-up.sh 2` starts two more.
# Every worker reads the same instance ($DAGSTER_HOME/dagster.yaml) and Celery config as the code location, and
# inherits this shell's environment: DAGSTER_PG_*, SIM_PIPELINE_WAREHOUSE and the provider keys must be set here.
#
# Variables (all optional but DAGSTER_HOME and the two Celery URLs):
#   DAGSTER_HOME                    the instance directory (deploy/dagster.yaml copied there for production)
#   SIM_PIPELINE_CELERY_BROKER      e.g. pyamqp://guest@127.0.0.1:5672//
#   SIM_PIPELINE_CELERY_BACKEND     e.g. redis://127.0.0.1:6379/1
#   SIM_PIPELINE_WORKERS            N when no argument is given
#   SIM_PIPELINE_WORKER_DIR         pid files and logs (default .celery_workers in the repository)
#   SIM_PIPELINE_WORKER_CONCURRENCY processes per worker
#   SIM_PIPELINE_CELERY_QUEUE       the queue the workers take steps from (the executor's task_default_queue)
#   SIM_PIPELINE_CELERY_CONFIG      the Celery config file (default deploy/celery.yaml)
#   SIM_PIPELINE_BIN                where dagster-celery and celery are (default .venv/bin)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT_WORKERS=2  # one per core of a small machine; each worker runs one step at a time
DEFAULT_CONCURRENCY=1  # one step per worker process: a step keeps its model calls in flight concurrently itself
START_TIMEOUT_S=60  # a worker imports Celery and Dagster and connects to the broker in a few seconds

N="${1:-${SIM_PIPELINE_WORKERS:-$DEFAULT_WORKERS}}"
DIR="${SIM_PIPELINE_WORKER_DIR:-$REPO/.celery_workers}"
CONCURRENCY="${SIM_PIPELINE_WORKER_CONCURRENCY:-$DEFAULT_CONCURRENCY}"
QUEUE="${SIM_PIPELINE_CELERY_QUEUE:-dagster}"
CONFIG="${SIM_PIPELINE_CELERY_CONFIG:-$REPO/deploy/celery.yaml}"
BIN="${SIM_PIPELINE_BIN:-$REPO/.venv/bin}"

: "${DAGSTER_HOME:?must name the instance directory whose dagster.yaml the runs use}"
: "${SIM_PIPELINE_CELERY_BROKER:?must be the broker URL the code location uses, e.g. pyamqp://guest@127.0.0.1:5672//}"
: "${SIM_PIPELINE_CELERY_BACKEND:?must be the result backend URL the code location uses, e.g. redis://127.0.0.1:6379/1}"
if ! [[ "$N" =~ ^[0-9]+$ ]]; then
  echo "scale-up: N must be a whole number, got '$N'. Fix: deploy/scale-up.sh 4" >&2
  exit 2
fi
if [[ ! -x "$BIN/dagster-celery" ]]; then
  echo "scale-up: $BIN/dagster-celery not found. Fix: .venv/bin/pip install -e '.[scale]' (or set SIM_PIPELINE_BIN)" >&2
  exit 2
fi

mkdir -p "$DIR"
cd "$REPO"  # a detached worker keeps this directory: relative paths (data/warehouse, data/cache) mean what they
            # mean for the code location, which deploy/workspace.yaml starts here too
export PATH="$BIN:$PATH"  # dagster-celery starts `celery` from PATH
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # the code location deploy.definitions_celery

alive() {  # alive PIDFILE: the pid file names a running Celery worker (not a recycled pid)
  local pid
  pid="$(cat "$1" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q celery
}

started=()
declare -A offset  # where each started worker's log ended before this start: older "ready" lines do not count
for ((i = 1; i <= N; i++)); do
  pidfile="$DIR/w$i.pid"
  log="$DIR/w$i.log"
  if alive "$pidfile"; then
    echo "worker sim-w$i: already running (pid $(cat "$pidfile"))"
    continue
  fi
  rm -f "$pidfile"
  offset[$i]="$(stat -c %s "$log" 2>/dev/null || echo 0)"
  # Celery detaches itself (a new session), writes the pid file and logs to the log file.
  if ! "$BIN/dagster-celery" worker start -A dagster_celery.app -y "$CONFIG" -n "sim-w$i" -q "$QUEUE" -- \
      --concurrency="$CONCURRENCY" --detach --pidfile="$pidfile" --logfile="$log" >>"$log" 2>&1; then
    echo "scale-up: worker sim-w$i did not start; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  started+=("$i")
done

deadline=$((SECONDS + START_TIMEOUT_S))
for i in ${started[@]+"${started[@]}"}; do
  until alive "$DIR/w$i.pid" && tail -c +"$((offset[$i] + 1))" "$DIR/w$i.log" | grep -q "sim-w$i@.* ready"; do
    if ((SECONDS >= deadline)); then
      echo "scale-up: worker sim-w$i is not ready after ${START_TIMEOUT_S}s; the end of $DIR/w$i.log:" >&2
      tail -n 20 "$DIR/w$i.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "worker sim-w$i: ready (pid $(cat "$DIR/w$i.pid"), log $DIR/w$i.log)"
done
