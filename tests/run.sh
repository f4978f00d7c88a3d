#!/usr/bin/env bash
# run.sh — runs every test: Boost.Test units, MPI tests at each rank count, end-to-end scripts.
#
# An MPI test tests/mpi/NAME.cpp declares its rank counts on a line "// np: 1 2 3 4", and the
# shapes it runs on emulated nodes (jobs/local/cluster.sh) on a line "// nodes: 2x1 2x2"
# (nodes x ranks a node; default 2x1 2x2, "none" for none). The MPI suite runs on this machine,
# then again across 2 emulated nodes (network namespaces), brought up before and removed after;
# where namespaces are not permitted that part is skipped with the reason.
# An end-to-end test is tests/e2e/*.sh; it exits non-zero on failure.
# Every run is under `timeout`, so a hang is a failure with a message, never a stuck CI.
# The last line is "N passed, N failed".
set -u
BIN=${BIN:-bin}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
LOG_DIR=${LOG_DIR:-output/test-logs}
mkdir -p "$LOG_DIR"
passed=0; failed=0; failures=()
start=$(date +%s)

# The seconds since `timed` last ran go on each result line, so the slow tests show themselves.
timed() { step_start=$(date +%s.%N); }
took() { awk -v a="$step_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }'; }
record() {  # record NAME STATUS LOG
  if [ "$2" = 0 ]; then
    passed=$((passed + 1)); printf '  PASS  %-44s %s\n' "$1" "$(took)"
  else
    failed=$((failed + 1)); failures+=("$1"); printf '  FAIL  %s (exit %s; log %s; %s)\n' "$1" "$2" "$3" "$(took)"
    tail -n 25 "$3" | sed 's/^/        | /'
  fi
}

filter=${1:-}
PYTHON=${PYTHON:-/usr/bin/python3}
if [ -x "$BIN/tests/unit" ] && [[ -z "$filter" || "unit" == *"$filter"* ]]; then
  echo "== unit tests (Boost.Test)"
  log="$LOG_DIR/unit.log"
  xml="$LOG_DIR/unit.junit.xml"
  rm -f "$xml"
  timed
  # A readable log and Boost's JUnit report; each test case's verdict is read from the report.
  timeout -k 10 900 "$BIN/tests/unit" --report_level=detailed \
    --logger="HRF,test_suite,stdout:JUNIT,all,$xml" >"$log" 2>&1
  status=$?
  # One line per test case: "pass NAME", "fail NAME" or "skip NAME"; nothing when the report is
  # missing or unreadable (a crash or a timeout before Boost wrote it).
  verdicts=$("$PYTHON" tests/junit_verdicts.py "$xml" 2>>"$log")
  n_cases=0
  while read -r verdict name; do
    [ -n "$verdict" ] || continue
    n_cases=$((n_cases + 1))
    case $verdict in
      pass) passed=$((passed + 1)) ;;
      fail) failed=$((failed + 1)); failures+=("unit/$name"); printf '  FAIL  unit/%s\n' "$name" ;;
      skip) printf '  SKIP  unit/%s\n' "$name" ;;
    esac
  done <<<"$verdicts"
  echo "  $n_cases unit test cases in the JUnit report (log $log, report $xml), $(took)"
  if [ "$status" != 0 ] && ! grep -q '^fail ' <<<"$verdicts"; then
    record "unit (crashed or timed out, or failed outside a test case)" "$status" "$log"
  fi
fi

echo "== MPI tests"
for src in tests/mpi/*.cpp; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  [[ -z "$filter" || "mpi_$name" == *"$filter"* ]] || continue
  nps=$(sed -n 's|^// np: *||p' "$src" | head -1)
  for np in ${nps:-2}; do
    log="$LOG_DIR/mpi_${name}_np$np.log"
    timed
    timeout -k 10 600 $MPIRUN -np "$np" "$BIN/tests/mpi_$name" --report_level=short >"$log" 2>&1
    record "mpi_$name np=$np" $? "$log"
  done
done

# The MPI suite across emulated nodes: every node a network namespace with its own hostname.
cluster_prefix=rtt$(($$ % 100000))
cluster_up=""
cluster_down() {
  [ -z "$cluster_up" ] || jobs/local/cluster.sh down --prefix "$cluster_prefix" >/dev/null 2>&1
  cluster_up=""
}
trap cluster_down EXIT
trap 'cluster_down; exit 130' INT TERM
multinode=()
for src in tests/mpi/*.cpp; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  [[ -z "$filter" || "mpi_${name}_nodes" == *"$filter"* ]] || continue
  shapes=$(sed -n 's|^// nodes: *||p' "$src" | head -1)
  for shape in ${shapes:-2x1 2x2}; do
    [ "$shape" = none ] || multinode+=("$name $shape")
  done
done
if [ ${#multinode[@]} -gt 0 ]; then
  echo "== MPI tests across 2 emulated nodes"
  log="$LOG_DIR/cluster_up.log"
  timed
  up_status=0
  jobs/local/cluster.sh up --nodes 2 --slots 2 --prefix "$cluster_prefix" >"$log" 2>&1 || up_status=$?
  if [ "$up_status" = 2 ] && ! grep -q "error:" "$log"; then
    printf '  SKIP  MPI tests across nodes: %s\n' "$(head -1 "$log")"
  elif [ "$up_status" != 0 ]; then
    record "cluster.sh up --nodes 2" "$up_status" "$log"
    jobs/local/cluster.sh down --prefix "$cluster_prefix" >/dev/null 2>&1
  else
    cluster_up=1
    # shellcheck disable=SC1090
    source "/run/ringtrain-cluster/$cluster_prefix/mpirun.env"
    for test in "${multinode[@]}"; do
      read -r name shape <<<"$test"
      per_node=${shape#*x}
      np=$(( ${shape%x*} * per_node ))
      log="$LOG_DIR/mpi_${name}_nodes$shape.log"
      timed
      timeout -k 10 600 $MPIRUN $RT_CLUSTER_MPIRUN_ARGS --map-by "ppr:$per_node:node" -np "$np" \
        "$BIN/tests/mpi_$name" --report_level=short >"$log" 2>&1
      record "mpi_$name nodes=$shape" $? "$log"
    done
    cluster_down
  fi
fi

echo "== end-to-end tests"
for script in tests/e2e/*.sh; do
  [ -e "$script" ] || continue
  name=$(basename "$script" .sh)
  [[ -z "$filter" || "e2e_$name" == *"$filter"* ]] || continue
  log="$LOG_DIR/e2e_$name.log"
  timed
  BIN=$BIN MPIRUN="$MPIRUN" timeout -k 10 900 bash "$script" >"$log" 2>&1
  record "e2e/$name" $? "$log"
done

echo "== took $(( $(date +%s) - start )) s"
if [ ${#failures[@]} -gt 0 ]; then printf 'failed: %s\n' "${failures[@]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
