#!/usr/bin/env bash
# relink_while_running.sh — a program started while make relinks it runs (the old file or the
# new): make writes each program to NAME.part and renames it over the old one. Linked in place,
# the program is open for writing while the linker works and the kernel refuses to execute it
# (ETXTBSY; mpirun: "could not access or execute an executable", exit 132, as e2e/loss_scale met
# it beside a build). rt-fibergen is relinked into a private folder 6 times (make -W: its object
# taken as new, nothing recompiled) while it is started over and over; every start must run.
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir relink

# Only the link runs: the object and the libraries are left as they are (-o), so that this make
# never rebuilds in the shared build folder beside the other lane's scripts.
relink() {
  make --no-print-directory BIN="$work/bin" -o build/libringtrain.a -o build/libringtrain_tools.a \
    -o build/tools/rt-fibergen.o -W build/tools/rt-fibergen.o "$work/bin/rt-fibergen" \
    >>"$work/make.log" 2>&1
}
relink || { cat "$work/make.log"; fail "make $work/bin/rt-fibergen"; }
(for _ in 1 2 3 4 5 6; do relink || exit 1; done) &
linker=$!
starts=0 failed=0
while kill -0 "$linker" 2>/dev/null; do
  starts=$((starts + 1))
  "$work/bin/rt-fibergen" --help >/dev/null 2>"$work/start.err" ||
    { failed=$((failed + 1)); cp "$work/start.err" "$work/failed.err"; }
done
wait "$linker" || { cat "$work/make.log"; fail "a relink failed"; }
links=$(grep -c "LINK" "$work/make.log")
echo "relink_while_running: $starts starts beside $links links, $failed failed"
[ "$links" = 7 ] || fail "$links links, expected 7: $(cat "$work/make.log")"
[ "$starts" -gt 1 ] || fail "only $starts start while make relinked"
[ "$failed" = 0 ] || fail "$failed of $starts starts failed while make relinked: $(cat "$work/failed.err")"
ls "$work/bin" | grep -q '\.part$' && fail "make left a .part file: $(ls "$work/bin")"
echo "PASS: every start ran while make relinked the program"
