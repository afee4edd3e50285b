# Helpers for e2e test scripts: source this file (bash).
#
#   wait_for DESCRIPTION TIMEOUT_SECONDS CMD...   poll CMD until it succeeds, within a deadline
#   run_test [--alone] NAME FUNCTION              run one test, print --- PASS/FAIL: NAME (Xs)
#                                                 (E2E_RUN=REGEX: only tests whose names match)
#                                                 --alone: it restarts or reconfigures what
#                                                 other suites share (the reconciler, the API
#                                                 server) or measures it, so it must not run
#                                                 beside them. E2E_PART=shared runs only the
#                                                 other tests, E2E_PART=alone only these.
#   beside COMMAND...                             run COMMAND (run_test calls, one after another)
#                                                 in the background, beside the tests that follow:
#                                                 for tests of a suite that share nothing (with
#                                                 E2E_PART=shared only; else in the foreground)
#   wait_beside                                   wait for every `beside`, print its output
#                                                 whole and count its tests
#   summary                                       print "SUITE: N passed, M failed"; non-zero if any failed
#   dump_debug NAMESPACE                          pods, events, describe + logs of unhealthy pods
#   go_tool NAME PACKAGE VERSION                  the path of Go tool NAME, built from the Go
#                                                 module proxy once per version into $TOOLS
#
# Each test FUNCTION runs in a subshell with `set -e`, so its first failing command fails
# the test; variables it sets do not reach later tests (keep shared state in the script).
# The suite name in the summary line is E2E_SUITE, by default the script's name without .sh.

E2E_SUITE=${E2E_SUITE:-$(basename "${0%.sh}")}
E2E_POLL_INTERVAL=${E2E_POLL_INTERVAL:-0.5}
_E2E_PASSED=0
_E2E_FAILED=0
_E2E_FAILED_NAMES=()

# wait_for DESCRIPTION TIMEOUT_SECONDS CMD...
wait_for() {
  local what=$1 timeout=$2; shift 2
  local start=$SECONDS out rc
  while :; do
    out=$("$@" 2>&1) && return 0
    rc=$?
    if ((SECONDS - start >= timeout)); then
      echo "timed out after ${timeout}s waiting for: $what" >&2
      echo "  last command: $*" >&2
      echo "  last exit code: $rc; last output:" >&2
      printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /' >&2
      return 1
    fi
    sleep "$E2E_POLL_INTERVAL"
  done
}

_e2e_now() { date +%s.%N; }
_e2e_elapsed() { awk -v a="$1" -v b="$(_e2e_now)" 'BEGIN { printf "%.1f", b - a }'; }

# run_test [--alone] NAME FUNCTION [ARGS...]
run_test() {
  local part=shared
  if [[ $1 == --alone ]]; then part=alone; shift; fi
  local name=$1; shift
  local t0 rc
  # E2E_RUN=REGEX runs only the tests whose names match (for working on one test).
  [[ -z ${E2E_RUN:-} || $name =~ $E2E_RUN ]] || return 0
  # e2e/run-all runs each suite's shared tests beside other suites, its alone ones after.
  [[ -z ${E2E_PART:-} || $part == "$E2E_PART" ]] || return 0
  t0=$(_e2e_now)
  echo "=== RUN   $name"
  # errtrace makes the ERR trap name the failing command inside test functions too.
  (set -eE; trap 'echo "  failed: ${BASH_SOURCE[0]##*/}:$LINENO: $BASH_COMMAND" >&2' ERR; "$@")
  rc=$?
  if ((rc == 0)); then
    _E2E_PASSED=$((_E2E_PASSED + 1))
    echo "--- PASS: $name ($(_e2e_elapsed "$t0")s)"
  else
    _E2E_FAILED=$((_E2E_FAILED + 1))
    _E2E_FAILED_NAMES+=("$name")
    echo "--- FAIL: $name ($(_e2e_elapsed "$t0")s)"
  fi
  return 0
}

_E2E_BESIDE_PIDS=()
_E2E_BESIDE_LOGS=()
# beside COMMAND...: COMMAND in the background, its output kept for wait_beside. Only
# when the suite runs its shared tests alone (E2E_PART=shared, as e2e/run-all does): else
# it may hold tests that run alone, and COMMAND runs in the foreground.
beside() {
  local log
  if [[ ${E2E_PART:-} != shared ]]; then "$@"; return 0; fi
  log=$(mktemp)
  "$@" >"$log" 2>&1 </dev/null &
  _E2E_BESIDE_PIDS+=($!) _E2E_BESIDE_LOGS+=("$log")
}

# wait_beside: each `beside` waited for, its output printed whole, its tests counted (their
# run_test ran in a subshell, so they are counted from its PASS and FAIL lines); one that
# died before its tests ended counts as a failure
wait_beside() {
  local i log name
  for i in "${!_E2E_BESIDE_PIDS[@]}"; do
    log=${_E2E_BESIDE_LOGS[$i]}
    wait "${_E2E_BESIDE_PIDS[$i]}" || echo "--- FAIL: beside#$i (exited with $?)" >>"$log"
    cat "$log"
    _E2E_PASSED=$((_E2E_PASSED + $(grep -c '^--- PASS: ' "$log")))
    while read -r name; do
      _E2E_FAILED=$((_E2E_FAILED + 1))
      _E2E_FAILED_NAMES+=("$name")
    done < <(sed -n 's/^--- FAIL: \([^ ]*\) .*$/\1/p' "$log")
    rm -f "$log"
  done
  _E2E_BESIDE_PIDS=() _E2E_BESIDE_LOGS=()
}

# summary: the closing line; returns 1 if any test failed
summary() {
  if ((_E2E_FAILED > 0)); then
    echo "failed tests: ${_E2E_FAILED_NAMES[*]}"
  fi
  echo "$E2E_SUITE: $_E2E_PASSED passed, $_E2E_FAILED failed"
  ((_E2E_FAILED == 0))
}

# dump_debug NAMESPACE: what a human needs to see when a test fails
dump_debug() {
  local ns=$1 pod phase
  echo "----- debug: namespace $ns -----" >&2
  kubectl -n "$ns" get all,pvc,events -o wide >&2 2>&1 || true
  kubectl get pv -o wide >&2 2>&1 || true
  kubectl -n "$ns" get events --sort-by=.lastTimestamp >&2 2>&1 || true
  kubectl -n "$ns" get pods --no-headers -o custom-columns=N:.metadata.name,P:.status.phase 2>/dev/null |
    while read -r pod phase; do
      [[ $phase == Succeeded ]] && continue
      local ready
      ready=$(kubectl -n "$ns" get pod "$pod" -o jsonpath='{.status.containerStatuses[*].ready}' 2>/dev/null || true)
      [[ $phase == Running && $ready != *false* ]] && continue
      echo "----- pod $pod ($phase) -----" >&2
      kubectl -n "$ns" describe pod "$pod" >&2 2>&1 || true
      kubectl -n "$ns" logs "$pod" --all-containers --tail=50 >&2 2>&1 || true
    done
  echo "----- end debug -----" >&2
}

# go_tool NAME PACKAGE VERSION: the tool's path, built once per version outside the checkout
# (in $TOOLS, by default /var/cache/hellostateful/tools).
go_tool() {
  local name=$1 package=$2 version=$3 tools=${TOOLS:-${HS_E2E_CACHE:-/var/cache/hellostateful}/tools}
  local dir="$tools/$1-$3" tmp
  if [[ ! -x $dir/$name ]]; then
    mkdir -p "$tools"
    (
      flock 9
      if [[ ! -x $dir/$name ]]; then
        echo "building $name $version from the Go module proxy" >&2
        tmp=$(mktemp -d "$dir.tmp.XXXXXX")
        GOBIN=$tmp GOTOOLCHAIN=local CGO_ENABLED=0 go install "$package@$version" >&2
        mkdir -p "$dir"
        mv "$tmp/$name" "$dir/"
        rmdir "$tmp"
      fi
    ) 9>"$tools/.$name-$version.lock"
  fi
  echo "$dir/$name"
}
