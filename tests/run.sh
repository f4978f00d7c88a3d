#!/usr/bin/env bash
# run.sh — runs the tests: Boost.Test units, MPI tests at each rank count, end-to-end scripts.
#
#   tests/run.sh                 every test (make test)
#   tests/run.sh --quick         the inner loop (make check): the unit tests and each MPI test at
#                                the rank counts of its "// quick:" line; prints what it left out
#   tests/run.sh --list          the name of every test, one a line (--quick --list: the quick ones)
#   tests/run.sh [--quick] NAME  the test called NAME (as a PASS or FAIL line prints it, e.g.
#                                'mpi_test_shm_ring np=3', e2e/checkpoint, unit/nn_model/zoo_sizes_and_flops),
#                                or, where no test has that name, every test whose name contains it
#                                (mpi_test_shm_ring, e2e/stall, nodes=2x2); older spellings
#                                mpi_NAME_nodes and e2e_NAME still work
#   tests/run.sh --exclude TEXT  leaves out every test whose name contains TEXT (with the above)
#
# An MPI test tests/mpi/NAME.cpp declares its rank counts on a line "// np: 1 2 3 4", the counts
# make check runs on a line "// quick: 2" (none when absent), and the shapes it runs on emulated
# nodes (jobs/local/cluster.sh) on a line "// nodes: 2x1 2x2" (nodes x ranks a node; default
# 2x1 2x2, "none" for none). The MPI suite runs on this machine, then again across 2 emulated
# nodes (network namespaces), brought up before and removed after; where namespaces are not
# permitted that part is skipped with the reason.
# An end-to-end test is tests/e2e/*.sh; it exits non-zero on failure.
# Every run is under `timeout`, so a hang is a failure with a message, never a stuck CI. Each
# result line gives the test's seconds; a failure gives its log's tail and the command that
# reruns just that test. The last line is "N passed, N failed".
set -u
BIN=${BIN:-bin}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# OpenMPI's ob1 messaging layer, which these machines select anyway, named outright: before it
# settles on ob1, every process opens the cm layer and probes PSM and PSM2 (Omni-Path) for a
# fabric none of them has, 0.2 s a start (0.34 s against 0.14 s for a 2-rank MPI_Init and
# barrier here); the suite starts several hundred. A machine that sets OMPI_MCA_pml keeps its own.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
LOG_DIR=${LOG_DIR:-output/test-logs}
PYTHON=${PYTHON:-/usr/bin/python3}

quick=0 list=0 filter="" exclude=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --list) list=1 ;;
    --exclude) [ $# -ge 2 ] || { echo "run.sh: --exclude needs a TEXT" >&2; exit 2; }
               exclude=$2; shift ;;
    -h | --help) sed -n '4,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see tests/run.sh --help)" >&2; exit 2 ;;
    *) [ -z "$filter" ] || { echo "run.sh: one NAME at most (got '$filter' and '$1')" >&2; exit 2; }
       filter=$1 ;;
  esac
  shift
done

# ---- every test, by name ------------------------------------------------------------------------
# Parallel arrays: the name a result line prints, the older spelling a filter may use, and
# whether make check runs it.
names=() aliases=() quicks=()
add() { names+=("$1"); aliases+=("$2"); quicks+=("$3"); }
first_line() { sed -n "s|^// $1: *||p" "$2" | head -1; }
[ ! -x "$BIN/tests/unit" ] || add unit unit 1
for src in tests/mpi/*.cpp; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  nps=$(first_line np "$src") quick_nps=" $(first_line quick "$src") "
  for np in ${nps:-2}; do
    add "mpi_$name np=$np" "mpi_$name" "$([[ "$quick_nps" == *" $np "* ]] && echo 1 || echo 0)"
  done
done
for src in tests/mpi/*.cpp; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  shapes=$(first_line nodes "$src")
  for shape in ${shapes:-2x1 2x2}; do
    [ "$shape" = none ] || add "mpi_$name nodes=$shape" "mpi_${name}_nodes" 0
  done
done
for script in tests/e2e/*.sh; do
  [ -e "$script" ] || continue
  name=$(basename "$script" .sh)
  add "e2e/$name" "e2e_$name" 0
done

# A NAME that is a test's whole name picks that test alone (e2e/checkpoint, not also
# e2e/checkpoint_faults); unit/SUITE/CASE picks one unit test case.
exact=0 unit_case=""
for n in "${names[@]}"; do [ "$n" != "$filter" ] || exact=1; done
if [[ "$filter" == unit/* ]]; then unit_case=${filter#unit/}; filter=unit; exact=1; fi
selected=()  # 1 where the test runs
for i in "${!names[@]}"; do
  pick=1
  if [ -n "$filter" ]; then
    if [ "$exact" = 1 ]; then
      [ "${names[$i]}" = "$filter" ] || pick=0
    else
      [[ "${names[$i]}" == *"$filter"* || "${aliases[$i]}" == *"$filter"* ]] || pick=0
    fi
  fi
  [ "$quick" = 0 ] || [ "${quicks[$i]}" = 1 ] || pick=0
  [ -z "$exclude" ] || [[ "${names[$i]}" != *"$exclude"* ]] || pick=0
  selected+=("$pick")
done
if [ "$list" = 1 ]; then
  for i in "${!names[@]}"; do [ "${selected[$i]}" = 0 ] || echo "${names[$i]}"; done
  exit 0
fi
runs() { [ "${selected[$1]}" = 1 ]; }  # runs INDEX
n_selected=0
for s in "${selected[@]}"; do n_selected=$((n_selected + s)); done
if [ "$n_selected" = 0 ]; then
  echo "run.sh: no test matches '$filter'$([ "$quick" = 0 ] || echo ' among the quick ones'); tests/run.sh --list names them" >&2
  exit 2
fi

mkdir -p "$LOG_DIR"
passed=0; failed=0; failures=()
start=$(date +%s)

# The seconds since `timed` last ran go on each result line, so the slow tests show themselves.
timed() { step_start=$(date +%s.%N); }
took() { awk -v a="$step_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }'; }
# The command that reruns just the test NAME, quoted for a shell.
rerun_of() {
  local bin=""
  [ "$BIN" = bin ] || bin="BIN=$BIN "
  if [[ "$1" == *" "* ]]; then printf "%sbash tests/run.sh '%s'" "$bin" "$1"; else printf '%sbash tests/run.sh %s' "$bin" "$1"; fi
}
# An MPI test by hand takes the environment this script exports (OpenMPI refuses root without
# the first two; the last: no single-copy transfers, which containers often forbid).
mpi_env="OMPI_MCA_btl_vader_single_copy_mechanism=none "
[ "$(id -u)" != 0 ] || mpi_env="OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $mpi_env"
record() {  # record NAME STATUS LOG [DIRECT-COMMAND]
  if [ "$2" = 0 ]; then
    passed=$((passed + 1)); printf '  PASS  %-44s %s\n' "$1" "$(took)"
  else
    failed=$((failed + 1)); failures+=("$1")
    printf '  FAIL  %s (exit %s; log %s; %s)\n' "$1" "$2" "$3" "$(took)"
    tail -n 25 "$3" | sed 's/^/        | /'
    printf '        rerun: %s\n' "$(rerun_of "$1")"
    [ -z "${4:-}" ] || printf '           or: %s\n' "$4"
  fi
}

# ---- unit tests ---------------------------------------------------------------------------------
for i in "${!names[@]}"; do
  [ "${names[$i]}" = unit ] && runs "$i" || continue
  echo "== unit tests (Boost.Test)"
  log="$LOG_DIR/unit.log"
  xml="$LOG_DIR/unit.junit.xml"
  rm -f "$xml"
  timed
  # A readable log and Boost's JUnit report; each test case's verdict is read from the report,
  # which names failed checks only (every passed one made it 29 MB).
  # A TMPDIR of its own, which it must leave empty: test files go under one folder per process
  # that is removed at exit (tests/unit/temp_dir.hpp), not into /tmp run after run.
  unit_tmp=$(mktemp -d /tmp/rt-unit.XXXXXX)
  TMPDIR=$unit_tmp timeout -k 10 900 "$BIN/tests/unit" ${unit_case:+--run_test="$unit_case"} \
    --report_level=detailed --logger="HRF,test_suite,stdout:JUNIT,error,$xml" >"$log" 2>&1
  status=$?
  left=$(cd "$unit_tmp" && find . -mindepth 1 -maxdepth 2 | sed 's|^\./||' | sort | head -n 5)
  rm -rf "$unit_tmp"
  # One line per test case: "pass NAME", "fail NAME" or "skip NAME"; nothing when the report is
  # missing or unreadable (a crash or a timeout before Boost wrote it).
  verdicts=$("$PYTHON" tests/junit_verdicts.py "$xml" 2>>"$log")
  n_cases=0
  while read -r verdict name; do
    [ -n "$verdict" ] || continue
    n_cases=$((n_cases + 1))
    case $verdict in
      pass) passed=$((passed + 1)) ;;
      fail) failed=$((failed + 1)); failures+=("unit/$name")
            printf '  FAIL  unit/%s\n' "$name"
            # Its failed checks as Boost logged them, so a CI log says why without the log file.
            grep -F "in \"$name\":" "$log" | sed 's/\x1b\[[0-9;]*m//g' | head -n 8 | sed 's/^/        | /'
            printf '        rerun: %s\n           or: %s\n' \
              "$(rerun_of "unit/$name")" "$BIN/tests/unit --run_test=$name" ;;
      skip) [ -n "$unit_case" ] || printf '  SKIP  unit/%s\n' "$name" ;;  # one case: the rest skip
    esac
  done <<<"$verdicts"
  echo "  $n_cases unit test cases in the JUnit report (log $log, report $xml), $(took)"
  if [ "$status" != 0 ] && ! grep -q '^fail ' <<<"$verdicts"; then
    record "unit (crashed or timed out, or failed outside a test case)" "$status" "$log" \
      "$BIN/tests/unit${unit_case:+ --run_test=$unit_case}"
  fi
  if [ -n "$left" ]; then
    echo "unit tests: left in their TMPDIR: $(tr '\n' ' ' <<<"$left")" >>"$log"
    record "unit (left files in its TMPDIR)" 1 "$log" "$BIN/tests/unit"
  fi
done

# ---- MPI tests on this machine ------------------------------------------------------------------
header=""
for i in "${!names[@]}"; do
  [[ "${names[$i]}" == *" np="* ]] && runs "$i" || continue
  [ -n "$header" ] || { header=1; echo "== MPI tests"; }
  name=${names[$i]% np=*} np=${names[$i]#* np=}
  log="$LOG_DIR/${name}_np$np.log"
  timed
  timeout -k 10 600 $MPIRUN -np "$np" "$BIN/tests/$name" --report_level=short >"$log" 2>&1
  record "${names[$i]}" $? "$log" "$mpi_env$MPIRUN -np $np $BIN/tests/$name"
done

# ---- the MPI suite across emulated nodes: every node a network namespace with its own hostname ---
multinode=()
for i in "${!names[@]}"; do
  [[ "${names[$i]}" == *" nodes="* ]] && runs "$i" && multinode+=("${names[$i]}")
done
cluster_prefix=rtt$(($$ % 100000))
cluster_up=""
cluster_down() {
  [ -z "$cluster_up" ] || jobs/local/cluster.sh down --prefix "$cluster_prefix" >/dev/null 2>&1
  cluster_up=""
}
trap cluster_down EXIT
trap 'cluster_down; exit 130' INT TERM
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
      name=${test% nodes=*} shape=${test#* nodes=}
      per_node=${shape#*x}
      np=$(( ${shape%x*} * per_node ))
      log="$LOG_DIR/${name}_nodes$shape.log"
      timed
      timeout -k 10 600 $MPIRUN $RT_CLUSTER_MPIRUN_ARGS --map-by "ppr:$per_node:node" -np "$np" \
        "$BIN/tests/$name" --report_level=short >"$log" 2>&1
      record "$test" $? "$log"
    done
    cluster_down
  fi
fi

# ---- end-to-end tests ---------------------------------------------------------------------------
# The e2e scripts' tiny dataset, generated once for all of them (tests/e2e/lib/e2e.sh).
RT_E2E_DATA_CACHE=$(mktemp -d /tmp/rt-e2e-data.XXXXXX)
export RT_E2E_DATA_CACHE
trap 'cluster_down; rm -rf "$RT_E2E_DATA_CACHE"' EXIT
# E2E_LANES scripts at a time (default 2): most of a script's time is start-ups and waits for a
# timeout, which overlap well. Three kinds run apart:
#   E2E_ALONE   with nothing beside them, first, one after another: those whose property is a
#               timing of their own under a known load, two jobs at a time (the stall scripts:
#               stall_phases runs two of its cases at once; the two that run one case at a time
#               run beside each other, joined by a "+");
#   E2E_SERIAL  one at a time in a lane of their own, beside the others: those that bring up
#               emulated nodes or a Slurm (network namespaces, a bridge, fixed ports), which
#               would collide with each other. The other scripts' mpiruns keep to the loopback
#               interface, so a bridge that comes and goes beside them is never one they use;
#   E2E_LONG    the slowest of a 2-core run, slowest first, before the rest (a long script
#               started last runs beside an idle lane).
E2E_LANES=${E2E_LANES:-2}
E2E_ALONE=${E2E_ALONE:-"stall_phases stall_no_progress+fusion_stall"}
E2E_SERIAL=${E2E_SERIAL:-"slurm_jobs multinode_faults multinode_train"}
E2E_LONG=${E2E_LONG:-"gpu_rehearsal checkpoint_faults bundle train predict checkpoint optimizers \
weight_check autotune data_split_mismatch"}
declare -A e2e_pid_name=() e2e_started=()
# Each script gets OpenMPI session folders of its own: an mpirun that ends removes the shared
# /tmp/ompi.HOST.UID when it is empty, which broke another script's mpirun starting in it
# ("A call to mkdir was unable to create the desired directory", seen with two lanes).
e2e_start() {  # e2e_start NAME [MCA-ENV...]: the script in the background, its exit code in a file
  local name=$1 sessions
  shift
  rm -f "$LOG_DIR/e2e_$name.status"
  e2e_started[$name]=$(date +%s.%N)
  sessions=$(mktemp -d /tmp/rt-ompi.XXXXXX)
  (
    env "$@" OMPI_MCA_orte_tmpdir_base="$sessions" BIN="$BIN" MPIRUN="$MPIRUN" timeout -k 10 900 \
      bash "tests/e2e/$name.sh" >"$LOG_DIR/e2e_$name.log" 2>&1
    echo $? >"$LOG_DIR/e2e_$name.status"
    rm -rf "$sessions"
  ) &
  e2e_pid_name[$!]=$name
}
e2e_reaped=""
e2e_reap() {  # waits for one script to end, prints its result and names it in e2e_reaped
  local pid name
  wait -n -p pid "${!e2e_pid_name[@]}" || true
  name=${e2e_pid_name[$pid]}
  unset "e2e_pid_name[$pid]"
  e2e_reaped=$name
  step_start=${e2e_started[$name]}
  record "e2e/$name" "$(cat "$LOG_DIR/e2e_$name.status" 2>/dev/null || echo 1)" \
    "$LOG_DIR/e2e_$name.log" "BIN=$BIN bash tests/e2e/$name.sh"
}
declare -A e2e_selected=()
for i in "${!names[@]}"; do
  [[ "${names[$i]}" == e2e/* ]] && runs "$i" && e2e_selected[${names[$i]#e2e/}]=1
done
in_list() { [[ " $(echo $2) " == *" $1 "* ]]; }  # in_list NAME "LIST"
e2e_alone=() e2e_serial=() e2e_rest=()
for i in "${!names[@]}"; do  # in the order of names: alphabetical
  name=${names[$i]#e2e/}
  [ -n "${e2e_selected[$name]:-}" ] || continue
  if in_list "$name" "${E2E_ALONE//+/ }"; then e2e_alone+=("$name")
  elif in_list "$name" "$E2E_SERIAL"; then e2e_serial+=("$name")
  elif ! in_list "$name" "$E2E_LONG"; then e2e_rest+=("$name"); fi
done
e2e_others=()
for name in $E2E_LONG; do [ -z "${e2e_selected[$name]:-}" ] || e2e_others+=("$name"); done
e2e_others+=("${e2e_rest[@]}")
[ ${#e2e_selected[@]} = 0 ] || echo "== end-to-end tests ($E2E_LANES at a time)"
for group in $E2E_ALONE; do  # the selected members of each group, started together
  started=0
  for name in ${group//+/ }; do
    in_list "$name" "${e2e_alone[*]}" || continue
    e2e_start "$name"
    started=$((started + 1))
  done
  for ((; started > 0; started--)); do e2e_reap; done
done
serial_running="" next_serial=0 next_other=0
loopback_only=(OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo)
while [ "$next_serial" -lt ${#e2e_serial[@]} ] || [ "$next_other" -lt ${#e2e_others[@]} ] ||
  [ ${#e2e_pid_name[@]} -gt 0 ]; do
  if [ ${#e2e_pid_name[@]} -lt "$E2E_LANES" ] && [ -z "$serial_running" ] &&
    [ "$next_serial" -lt ${#e2e_serial[@]} ]; then
    serial_running=${e2e_serial[$next_serial]}
    next_serial=$((next_serial + 1))
    e2e_start "$serial_running"
  elif [ ${#e2e_pid_name[@]} -lt "$E2E_LANES" ] && [ "$next_other" -lt ${#e2e_others[@]} ]; then
    e2e_start "${e2e_others[$next_other]}" "${loopback_only[@]}"
    next_other=$((next_other + 1))
  else
    e2e_reap
    [ "$e2e_reaped" != "$serial_running" ] || serial_running=""
  fi
done

echo "== took $(( $(date +%s) - start )) s"
# What --quick left out, by suite, and how to run it.
if [ "$quick" = 1 ] && [ -z "$filter" ]; then
  n_np=0 n_nodes=0 n_e2e=0 left="" no_quick=""
  for i in "${!names[@]}"; do
    [ "${quicks[$i]}" = 0 ] || continue
    case ${names[$i]} in
      *" np="*) n_np=$((n_np + 1))
                name=${names[$i]% np=*}
                grep -q "^// quick: *[0-9]" "tests/mpi/${name#mpi_}.cpp" || [[ "$no_quick" == *" $name"* ]] ||
                  no_quick+=" $name" ;;
      *" nodes="*) n_nodes=$((n_nodes + 1)) ;;
      e2e/*) n_e2e=$((n_e2e + 1)); left+=" ${names[$i]#e2e/}" ;;
    esac
  done
  echo "left out (make test runs them; tests/run.sh --list names each):"
  echo "  $n_np MPI runs at the other rank counts of the // np: lines${no_quick:+, all of$no_quick}"
  echo "  $n_nodes MPI runs across 2 emulated nodes (the // nodes: lines)"
  echo "  $n_e2e end-to-end tests (tests/e2e):$left"
  echo "  run them all: make test (or bash tests/run.sh); one: bash tests/run.sh NAME"
fi
if [ ${#failures[@]} -gt 0 ]; then printf 'failed: %s\n' "${failures[@]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
