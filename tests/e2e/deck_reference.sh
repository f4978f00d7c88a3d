#!/usr/bin/env bash
# deck_reference.sh — docs/DECK.md is what `ringtrain --help-markdown` prints from the option
# table that --help and the deck parser use, so the reference cannot drift from the program: a
# key added, removed or reworded in src/config/config.cpp without `make docs` fails here.
source tests/e2e/lib/e2e.sh
e2e_workdir deck-reference

"$BIN/ringtrain" --help-markdown >"$work/DECK.md" || fail "ringtrain --help-markdown: exit $?"
if ! diff -u docs/DECK.md "$work/DECK.md" >"$work/diff"; then
  cat "$work/diff"
  fail "docs/DECK.md differs from ringtrain --help-markdown (lines - committed, + generated); run make docs"
fi
# Every key --help lists is a row of the reference.
for key in $("$BIN/ringtrain" --help | grep -o '^  --[a-z_]*\.[a-z0-9_]*' | sed 's/^  --//'); do
  grep -q "^| \`$key\` |" docs/DECK.md || fail "docs/DECK.md has no row for $key"
done
echo "docs/DECK.md matches ringtrain --help-markdown ($(grep -c '^| `[a-z_]*\.' docs/DECK.md) keys)"
