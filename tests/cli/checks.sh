# Sourced by the shell checks of tests/cli: a scratch folder $tmp removed on
# exit, `check` and `status_is`, and `finish` with the count of failures.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
status_is() { # expected status, command...
  local want=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq "$want" ] || { echo "  exit $rc, want $want: $*"; cat "$tmp/err"; return 1; }
}
finish() { # what was checked: exit 1 when a check failed
  [ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
  echo "all $1 checks passed"
}
