#!/usr/bin/env bash
# timeout: 60
# mk/install.mk: `make install-files DESTDIR=... PREFIX=/usr/local` (what `make install` runs after
# `all`) puts the binaries, the unit with ExecStart rewritten to PREFIX, the sysusers.d file, the
# env example, the man pages and the bash completion where the README says, with their modes; it
# keeps an existing /etc/dtrain (its mode, dtraind.env) and `make uninstall` removes exactly what
# it installed. Then the installed unit, seen from the DESTDIR as its root: `systemd-analyze
# verify` is silent, and the offline security review rates its exposure at most 1.5.
# (testbed_systemd_verify.sh checks the unit's contract; docs_man_completion.sh what the man pages
# and the completion say.)
source "$(dirname "$0")/lib.sh"

# A make started by `make test` must not join its jobserver or inherit its flags; BIN is the
# binaries under test, so nothing is built or relinked while other tests run.
mk() {
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make --no-print-directory -C "$DT_SRC_DIR" BIN="$DT_BIN_DIR" "$@"
}
[[ -x $DT_BIN_DIR/dtraind && -x $DT_BIN_DIR/dtrain ]] || dt_fail "no binaries in $DT_BIN_DIR: run make"
grep -E -q '^install: all$' "$DT_SRC_DIR/mk/install.mk" || dt_fail "make install must build (all) first"

root=$DT_TEST_TMP/root
unit=$root/usr/local/lib/systemd/system/dtraind.service
mk install-files DESTDIR="$root" PREFIX=/usr/local >"$DT_TEST_TMP/install.out" 2>&1 ||
  dt_fail "make install-files failed: $(cat "$DT_TEST_TMP/install.out")"
cat "$DT_TEST_TMP/install.out"

# mode_is PATH MODE: PATH exists with that octal mode.
mode_is() {
  [[ -e $1 ]] || dt_fail "not installed: $1"
  dt_assert_eq "$(stat -c %a "$1")" "$2" "mode of $1"
}
mode_is "$root/usr/local/bin/dtraind" 755
mode_is "$root/usr/local/bin/dtrain" 755
mode_is "$unit" 644
mode_is "$root/usr/local/lib/sysusers.d/dtrain.conf" 644
mode_is "$root/etc/dtrain/dtraind.env.example" 644
mode_is "$root/usr/local/share/man/man1/dtrain.1" 644
mode_is "$root/usr/local/share/man/man8/dtraind.8" 644
mode_is "$root/usr/local/share/bash-completion/completions/dtrain" 644
dt_assert_eq "$(readlink "$root/usr/local/share/bash-completion/completions/dtraind")" dtrain \
  "the dtraind completion is a link to dtrain's"
cmp -s "$DT_SRC_DIR/docs/man/dtrain.1" "$root/usr/local/share/man/man1/dtrain.1" ||
  dt_fail "installed dtrain.1 differs from docs/man/dtrain.1"
cmp -s "$DT_SRC_DIR/config/completion/dtrain.bash" "$root/usr/local/share/bash-completion/completions/dtrain" ||
  dt_fail "installed completion differs from config/completion/dtrain.bash"
cmp -s "$DT_BIN_DIR/dtraind" "$root/usr/local/bin/dtraind" || dt_fail "installed dtraind differs from $DT_BIN_DIR's"
cmp -s "$DT_SRC_DIR/config/systemd/dtrain.sysusers.conf" "$root/usr/local/lib/sysusers.d/dtrain.conf" ||
  dt_fail "installed sysusers.d file differs from config/systemd/dtrain.sysusers.conf"
dt_assert_contains "$DT_TEST_TMP/install.out" "INSTALL $unit" "install prints where the unit went"
if [[ -e $root/etc/dtrain/dtraind.env ]]; then dt_fail "install created dtraind.env (only the example)"; fi

# ExecStart: the PREFIX's daemon, confined to the data root and the state dir.
dt_assert_eq "$(grep -c '^ExecStart=' "$unit")" 1 "ExecStart= lines in the installed unit"
dt_assert_contains "$unit" '^ExecStart=/usr/local/bin/dtraind --tf-config /etc/dtrain/tf_config.json ' "ExecStart"
dt_assert_contains "$unit" '^ExecStart=.* --data-root /srv/dtrain .*--state-dir /var/lib/dtrain ' "ExecStart roots"
diff <(grep -v '^ExecStart=' "$DT_SRC_DIR/config/systemd/dtraind.service") <(grep -v '^ExecStart=' "$unit") ||
  dt_fail "install changed more of the unit than ExecStart="

# Another PREFIX: ExecStart follows it; /etc stays /etc. An existing /etc/dtrain keeps its mode and
# its dtraind.env, and uninstall leaves both (and only removes what it put there).
other=$DT_TEST_TMP/other
install -d -m 750 "$other/etc/dtrain"
echo "DTRAIND_ARGS=--keep-jobs 3" >"$other/etc/dtrain/dtraind.env"
mk install-files DESTDIR="$other" PREFIX=/usr >"$DT_TEST_TMP/other.out" 2>&1 ||
  dt_fail "make install-files PREFIX=/usr failed: $(cat "$DT_TEST_TMP/other.out")"
dt_assert_contains "$other/usr/lib/systemd/system/dtraind.service" '^ExecStart=/usr/bin/dtraind ' "ExecStart with PREFIX=/usr"
[[ -x $other/usr/bin/dtraind && -f $other/usr/lib/sysusers.d/dtrain.conf ]] || dt_fail "PREFIX=/usr layout"
[[ -f $other/usr/share/man/man1/dtrain.1 && -f $other/usr/share/man/man8/dtraind.8 ]] || dt_fail "PREFIX=/usr man pages"
[[ -L $other/usr/share/bash-completion/completions/dtraind ]] || dt_fail "PREFIX=/usr completion"
mode_is "$other/etc/dtrain" 750
dt_assert_contains "$other/etc/dtrain/dtraind.env" '^DTRAIND_ARGS=--keep-jobs 3$' "dtraind.env kept by install"
mk uninstall DESTDIR="$other" PREFIX=/usr >"$DT_TEST_TMP/uninstall.out" 2>&1 ||
  dt_fail "make uninstall failed: $(cat "$DT_TEST_TMP/uninstall.out")"
cat "$DT_TEST_TMP/uninstall.out"
left=$(cd "$other" && find . ! -type d | sort | tr '\n' ' ')
dt_assert_eq "$left" "./etc/dtrain/dtraind.env " "files left after uninstall"
dt_assert_contains "$DT_TEST_TMP/uninstall.out" "REMOVE  $other/usr/bin/dtraind" "uninstall prints what it removed"

# The CUDA backend: in PREFIX/lib/dtrain (where lib/nn/gpu.c looks from PREFIX/bin) when the build
# made one, absent otherwise; an install from a build without one removes a stale one (another
# build's ABI), and uninstall removes it and its dir. A BIN of links with a stand-in library
# checks both branches whether or not this build had nvcc.
cuda=$root/usr/local/lib/dtrain/libdtrain-cuda.so
if [[ -f $DT_BIN_DIR/libdtrain-cuda.so ]]; then
  mode_is "$cuda" 644
  cmp -s "$DT_BIN_DIR/libdtrain-cuda.so" "$cuda" || dt_fail "installed libdtrain-cuda.so differs from $DT_BIN_DIR's"
elif [[ -e $cuda ]]; then
  dt_fail "install put a CUDA backend in $cuda, but $DT_BIN_DIR has none"
fi
fakebin=$DT_TEST_TMP/fakebin
mkdir -p "$fakebin"
ln -s "$DT_BIN_DIR/dtraind" "$fakebin/dtraind"
ln -s "$DT_BIN_DIR/dtrain" "$fakebin/dtrain"
echo "a stand-in for the CUDA backend" >"$fakebin/libdtrain-cuda.so"
cu=$DT_TEST_TMP/cuda
cuda=$cu/opt/dtrain/lib/dtrain/libdtrain-cuda.so
mk install-files BIN="$fakebin" DESTDIR="$cu" PREFIX=/opt/dtrain >"$DT_TEST_TMP/cuda.out" 2>&1 ||
  dt_fail "make install-files with a CUDA backend failed: $(cat "$DT_TEST_TMP/cuda.out")"
mode_is "$cuda" 644
cmp -s "$fakebin/libdtrain-cuda.so" "$cuda" || dt_fail "installed libdtrain-cuda.so differs from BIN's"
dt_assert_contains "$DT_TEST_TMP/cuda.out" "INSTALL $cuda\$" "install prints where the CUDA backend went"
rm "$fakebin/libdtrain-cuda.so"
mk install-files BIN="$fakebin" DESTDIR="$cu" PREFIX=/opt/dtrain >"$DT_TEST_TMP/nocuda.out" 2>&1 ||
  dt_fail "make install-files without a CUDA backend failed: $(cat "$DT_TEST_TMP/nocuda.out")"
[[ ! -e $cuda ]] || dt_fail "a build without a CUDA backend left the earlier one in $cuda"
dt_assert_contains "$DT_TEST_TMP/nocuda.out" "REMOVE  $cuda" "install says it removed the stale backend"
echo "a stand-in for the CUDA backend" >"$fakebin/libdtrain-cuda.so"
mk install-files BIN="$fakebin" DESTDIR="$cu" PREFIX=/opt/dtrain >/dev/null 2>&1 || dt_fail "reinstall"
mk uninstall DESTDIR="$cu" PREFIX=/opt/dtrain >"$DT_TEST_TMP/cuda-un.out" 2>&1 ||
  dt_fail "make uninstall failed: $(cat "$DT_TEST_TMP/cuda-un.out")"
[[ ! -e $cu/opt/dtrain/lib/dtrain ]] || dt_fail "uninstall left $cu/opt/dtrain/lib/dtrain"
dt_assert_contains "$DT_TEST_TMP/cuda-un.out" "REMOVE  $cuda" "uninstall removes the CUDA backend"

# The installed unit, with the DESTDIR as root: verify resolves ExecStart there (so a wrong path
# fails) and needs systemd's own units beside it for the start transaction it simulates.
dt_require_cmd systemd-analyze
units=$(systemd-analyze unit-paths 2>/dev/null | grep -E -m1 '^/(usr/)?lib/systemd/system$' || true)
[[ -n $units && -d $units ]] || dt_skip "systemd's unit directory not found (systemd-analyze unit-paths)"
mkdir -p "$root/usr/lib/systemd"
cp -a "$(readlink -f "$units")" "$root/usr/lib/systemd/system"
rc=0
(cd "$DT_TEST_TMP" && systemd-analyze verify --man=no --generators=no --root="$root" dtraind.service) \
  >"$DT_TEST_TMP/verify.out" 2>&1 || rc=$?
cat "$DT_TEST_TMP/verify.out"
dt_assert_eq "$rc" 0 "systemd-analyze verify --root exit status"
if [[ -s $DT_TEST_TMP/verify.out ]]; then dt_fail "systemd-analyze verify complained about the installed unit (above)"; fi
# ...and the check has teeth: without the daemon in the root, verify fails.
mv "$root/usr/local/bin/dtraind" "$root/usr/local/bin/dtraind.away"
(cd "$DT_TEST_TMP" && systemd-analyze verify --man=no --generators=no --root="$root" dtraind.service) \
  >"$DT_TEST_TMP/verify-missing.out" 2>&1 && dt_fail "verify passed with no /usr/local/bin/dtraind in the root"
dt_assert_contains "$DT_TEST_TMP/verify-missing.out" "/usr/local/bin/dtraind" "verify names the missing daemon"
mv "$root/usr/local/bin/dtraind.away" "$root/usr/local/bin/dtraind"

if ! systemd-analyze security --help 2>&1 | grep -q -- --offline; then
  dt_skip "systemd-analyze security has no --offline (systemd < 250): install and verify checked"
fi
rc=0
(cd "$DT_TEST_TMP" && systemd-analyze security --offline=yes --root="$root" dtraind.service) \
  >"$DT_TEST_TMP/security.out" 2>&1 || rc=$?
dt_assert_eq "$rc" 0 "systemd-analyze security exit status"
grep -E '^✗' "$DT_TEST_TMP/security.out" || true
line=$(grep -E 'Overall exposure level for dtraind.service: [0-9]+\.[0-9]' "$DT_TEST_TMP/security.out" || true)
[[ -n $line ]] || dt_fail "no overall exposure in: $(tail -n 3 "$DT_TEST_TMP/security.out")"
echo "$line"
score=$(sed -E 's/.*dtraind\.service: ([0-9]+)\.([0-9]).*/\1\2/' <<<"$line")
((10#$score <= 15)) || dt_fail "exposure ${score:0:-1}.${score: -1} > 1.5: the unit lost hardening (list above)"
echo "install and unit OK"
