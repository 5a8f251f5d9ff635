#!/usr/bin/env bash
# timeout: 120
# The README and docs/ against the real binaries, where that is cheap:
#   - every link in README.md and docs/*.md resolves to a file in the repository (and an #anchor
#     to a heading of it); nothing points outside (no http(s):// link, no path out of the tree);
#     every README section that config/systemd/*, docs/*.md and the man pages name exists;
#   - TF_CONFIG: the README's example and config/tfconfig/*.json pass `dtraind --check`; the
#     README's two error lines are what dtraind prints for such configs; the keys the README gives
#     for `--check --json`, `--ready-file` and `dtrain cluster --json` are the ones printed;
#   - "On one machine": scripts/local-cluster.sh as the README runs it prints the export line of
#     DTRAIN_ADDR and DTRAIN_TOKEN_FILE, and with that environment alone `dtrain cluster` works;
#   - the CLI table names every verb `dtrain --help` lists; the Environment section every variable
#     the --help texts name; `dtrain summary` gives the README's parameter count and its error line;
#   - `make features` says what the build is, with or without nvcc, and never "CUDA build available".
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[[ -x $PY ]] || dt_skip "no /usr/bin/python3"
[[ -x $DT_BIN_DIR/dtrain && -x $DT_BIN_DIR/dtraind ]] || dt_fail "no binaries in $DT_BIN_DIR: run make"
README=$DT_SRC_DIR/README.md
DTRAIN=$DT_BIN_DIR/dtrain
DTRAIND=$DT_BIN_DIR/dtraind

# readme_section TITLE: the README's text under "## TITLE" (or ###) up to the next heading of
# the same or a higher level.
readme_section() {
  awk -v t="$1" '
    /^#+ / { lvl = index($0, " ") - 1; title = substr($0, lvl + 2)
             if (on && lvl <= onlvl) on = 0
             if (title == t) { on = 1; onlvl = lvl; next } }
    on' "$README"
}

# ---- links and section names --------------------------------------------------------------------
"$PY" - "$DT_SRC_DIR" <<'EOF' || dt_fail "links or section names (above)"
import os, re, sys
root = os.path.realpath(sys.argv[1])
bad = []

def slug(title):
    # GitHub's anchors: lower case, punctuation dropped (not - or _), spaces to hyphens.
    t = re.sub(r"[`*]", "", title.strip().lower())
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")

def headings(path):
    out, fence = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            out.append(line.split(" ", 1)[1].strip())
    return out

docs = [os.path.join(root, "README.md")] + sorted(
    os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
for doc in docs:
    text = open(doc, encoding="utf-8").read()
    rel = os.path.relpath(doc, root)
    for m in re.finditer(r"https?://\S+", text):
        bad.append(f"{rel}: points outside the repository: {m.group(0)}")
    if "../shared" in text:
        bad.append(f"{rel}: points outside the repository: ../shared")
    for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        path, _, anchor = target.partition("#")
        dest = os.path.realpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if dest != root and not dest.startswith(root + os.sep):
            bad.append(f"{rel}: link {target} leaves the repository")
            continue
        if not os.path.exists(dest):
            bad.append(f"{rel}: link {target}: no such file")
            continue
        if anchor:
            if not dest.endswith(".md"):
                bad.append(f"{rel}: link {target}: an anchor into a file that is not Markdown")
            elif anchor not in [slug(h) for h in headings(dest)]:
                bad.append(f"{rel}: link {target}: no heading with that anchor in {os.path.relpath(dest, root)}")

# Sections of the README named in words: `README's section "X"`, `README's "X"`, sections "X"
# and "Y", in the config files, docs/ and the man pages.
readme_titles = headings(os.path.join(root, "README.md"))
named = []
for rel in ["config/systemd/dtraind.env.example", "config/systemd/dtraind.service",
            "docs/BENCHMARKS.md", "docs/INTERNALS.md"]:
    text = open(os.path.join(root, rel), encoding="utf-8").read()
    text = re.sub(r"\n#\s*", " ", text)  # join comment lines
    for m in re.finditer(r"README(?:'s)?\s+(?:sections?\s+)?((?:\"[^\"]+\"(?:,?\s+(?:and\s+)?)?)+)", text):
        named += [(rel, t) for t in re.findall(r"\"([^\"]+)\"", m.group(1))]
for rel in ["docs/man/dtrain.1", "docs/man/dtraind.8"]:
    text = open(os.path.join(root, rel), encoding="utf-8").read()
    for m in re.finditer(r"README\.md of the source tree \(sections(.*?)\)", text, re.S):
        named += [(rel, t) for t in re.findall(r"\"([^\"]+)\"", m.group(1))]
for rel, title in named:
    if title not in readme_titles:
        bad.append(f"{rel}: names the README section \"{title}\", which does not exist")
for b in bad:
    print(b)
print(f"links and section names: {len(docs)} documents, {len(named)} named sections")
sys.exit(1 if bad else 0)
EOF

# ---- TF_CONFIG ----------------------------------------------------------------------------------
# The README's example: the first indented block of its TF_CONFIG section.
tf=$(readme_section TF_CONFIG | awk '/^    [^ ]/ || /^     / { b = 1; sub(/^    /, ""); print; next } b { exit }')
[[ $tf == *'"cluster"'* ]] || dt_fail "no TF_CONFIG example found in the README: $tf"
TF_CONFIG=$tf "$DTRAIND" --check --json >"$DT_TEST_TMP/check.json" 2>"$DT_TEST_TMP/check.err" ||
  dt_fail "the README's TF_CONFIG fails dtraind --check: $(cat "$DT_TEST_TMP/check.err")"
dt_assert_eq "$(dt_json_get chief "$DT_TEST_TMP/check.json")" "chief:0" "the README example's chief"
dt_assert_eq "$(dt_json_get rank "$DT_TEST_TMP/check.json")" 1 "worker 0's rank with a chief"
dt_assert_eq "$(dt_json_get world_size "$DT_TEST_TMP/check.json")" 3 "the README example's world size"
# The keys the README gives for --check --json.
keys_of() { grep -oE '"[a-z_]+"' <<<"$1" | tr -d '"' | sort -u; }
# json_after TEXT: the {...} in backquotes that follows TEXT in stdin.
json_after() { perl -0ne 'BEGIN { $t = shift } print $1 if /\Q$t\E.*?`(\{.*?\})`/s' "$1"; }
want=$(keys_of "$(readme_section dtraind | json_after '`--check --json` prints')")
for k in $want; do
  dt_json_get "$k" "$DT_TEST_TMP/check.json" >/dev/null 2>&1 || dt_fail "--check --json has no \"$k\" (README)"
done
[[ $(wc -w <<<"$want") -ge 7 ]] || dt_fail "the README's --check --json keys: only '$want'"
# The examples the README lists, from config/tfconfig/.
for f in $(readme_section TF_CONFIG | grep -oE '`[a-z0-9-]+\.json`' | tr -d '`'); do
  [[ -f $DT_SRC_DIR/config/tfconfig/$f ]] || dt_fail "README names config/tfconfig/$f, which does not exist"
  "$DTRAIND" --tf-config "$DT_SRC_DIR/config/tfconfig/$f" --check >/dev/null 2>"$DT_TEST_TMP/ex.err" ||
    dt_fail "config/tfconfig/$f fails dtraind --check: $(cat "$DT_TEST_TMP/ex.err")"
done
# The README's error lines are what dtraind says for those mistakes.
TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:7001", "127.0.0.1:7002"]}, "task": {"type": "worker", "index": 3}}' \
  "$DTRAIND" --check >/dev/null 2>"$DT_TEST_TMP/err1" && dt_fail "an out-of-range index passed --check"
TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:7000"], "worker": ["127.0.0.1:7001", "127.0.0.1:7000"]}, "task": {"type": "chief", "index": 0}}' \
  "$DTRAIND" --check >/dev/null 2>"$DT_TEST_TMP/err2" && dt_fail "a duplicate address passed --check"
n=0
while IFS= read -r line; do
  line=${line#"${line%%tfconfig:*}"}
  line=${line%…}
  line=${line%" "}
  grep -qF -- "$line" "$DT_TEST_TMP/err1" "$DT_TEST_TMP/err2" ||
    dt_fail "the README's error line is not what dtraind prints: '$line' (got: $(cat "$DT_TEST_TMP/err1" "$DT_TEST_TMP/err2"))"
  n=$((n + 1))
done < <(readme_section TF_CONFIG | grep -E '^ +tfconfig: ')
dt_assert_eq "$n" 2 "error lines checked in the README's TF_CONFIG section"

# ---- one daemon: --ready-file and dtrain cluster --json keys --------------------------------------
mapfile -t ports < <(dt_free_ports 1)
dt_start_daemon d0 -- --listen "127.0.0.1:${ports[0]}" --state-dir "$DT_TEST_TMP/state" \
  --data-root "$DT_TEST_TMP" --ready-file "$DT_TEST_TMP/d0.ready"
dt_wait_file "$DT_TEST_TMP/d0.ready" --timeout 20 || dt_fail "a one-worker daemon never became ready"
want=$(keys_of "$(readme_section dtraind | json_after '`--ready-file`')")
[[ $(wc -w <<<"$want") -ge 6 ]] || dt_fail "the README's --ready-file keys: only '$want'"
for k in $want; do
  dt_json_get "$k" "$DT_TEST_TMP/d0.ready" >/dev/null 2>&1 || dt_fail "--ready-file has no \"$k\" (README)"
done
"$DTRAIN" --addr "127.0.0.1:${ports[0]}" cluster --json >"$DT_TEST_TMP/cluster.json" ||
  dt_fail "dtrain cluster --json failed"
cluster_keys=$(readme_section "The CLI" | json_after '`dtrain cluster --json` prints')
[[ $cluster_keys == *'"tasks"'* ]] || dt_fail "the README's cluster --json keys: '$cluster_keys'"
for k in $(keys_of "${cluster_keys%%\"tasks\"*}") tasks; do
  dt_json_get "$k" "$DT_TEST_TMP/cluster.json" >/dev/null 2>&1 || dt_fail "cluster --json has no \"$k\" (README)"
done
for k in $(keys_of "${cluster_keys#*\"tasks\"}"); do
  dt_json_get "tasks.0.$k" "$DT_TEST_TMP/cluster.json" >/dev/null 2>&1 || dt_fail "cluster --json tasks[] have no \"$k\" (README)"
done
dt_stop_daemon d0 || dt_fail "the daemon did not leave cleanly"

# ---- "On one machine": the snippet, with a scratch --dir and a free port run ----------------------
snippet=$(readme_section "On one machine" | grep -E '^    ')
grep -qE '^    scripts/local-cluster\.sh 2 ' <<<"$snippet" || dt_fail "no local-cluster.sh line in 'On one machine'"
start=$(grep -E '^    scripts/local-cluster\.sh 2 ' <<<"$snippet" | sed -E 's/^ +//; s/--base-port [0-9]+ //')
lc=$DT_TEST_TMP/lc
dt_on_exit "DT_BIN_DIR='$DT_BIN_DIR' '$DT_SRC_DIR/scripts/local-cluster.sh' stop --dir '$lc' >/dev/null 2>&1"
# shellcheck disable=SC2086
(cd "$DT_SRC_DIR" && DT_BIN_DIR=$DT_BIN_DIR ${start/local-cluster.sh 2/local-cluster.sh 2 --dir $lc}) \
  >"$DT_TEST_TMP/lc.out" 2>&1 || dt_fail "'$start' failed: $(tail -n 20 "$DT_TEST_TMP/lc.out")"
cat "$DT_TEST_TMP/lc.out"
export_line=$(grep -oE 'export DTRAIN_ADDR=[^ ]+ DTRAIN_TOKEN_FILE=.+$' "$DT_TEST_TMP/lc.out") ||
  dt_fail "local-cluster.sh printed no 'export DTRAIN_ADDR=... DTRAIN_TOKEN_FILE=...' line"
grep -qE '^    export DTRAIN_ADDR=[^ ]+ DTRAIN_TOKEN_FILE=' <<<"$snippet" ||
  dt_fail "the README's export line is not the one local-cluster.sh prints"
(
  unset DTRAIN_ADDR DTRAIN_TOKEN_FILE TF_CONFIG
  eval "$export_line"
  [[ -r $DTRAIN_TOKEN_FILE ]] || dt_fail "DTRAIN_TOKEN_FILE=$DTRAIN_TOKEN_FILE is not readable"
  "$DTRAIN" cluster >"$DT_TEST_TMP/lc.cluster" 2>&1 || dt_fail "dtrain cluster with the printed export failed: $(cat "$DT_TEST_TMP/lc.cluster")"
  "$DTRAIN" cluster --json >"$DT_TEST_TMP/lc.json" || dt_fail "dtrain cluster --json failed"
  dt_assert_eq "$(dt_json_get tasks.1.state "$DT_TEST_TMP/lc.json")" joined "worker 1 of the local cluster"
  # ...and without the token the same call is refused: the export line is what made it work.
  DTRAIN_TOKEN_FILE='' "$DTRAIN" cluster >/dev/null 2>&1 && dt_fail "dtrain cluster worked without the token"
  true
)
# The data root the snippet passes reached the daemons.
grep -q -- "--data-root" <<<"$start" && { grep -q -- "--data-root" "/proc/$(cat "$lc/worker-0.pid")/cmdline" ||
  dt_fail "the snippet's --data-root did not reach the daemons"; }
DT_BIN_DIR=$DT_BIN_DIR "$DT_SRC_DIR/scripts/local-cluster.sh" stop --dir "$lc" || dt_fail "local-cluster.sh stop failed"

# ---- the CLI table and the Environment section ---------------------------------------------------
"$DTRAIN" --help >"$DT_TEST_TMP/help" || dt_fail "dtrain --help failed"
cli=$(readme_section "The CLI")
for v in $(awk '/^verbs:/ { v = 1; next } v && /^$/ { v = 0 } v && /^  [a-z]/ { print $1 }' "$DT_TEST_TMP/help"); do
  grep -qE "^\| \`$v( |\`)|, \`$v( |\`)" <<<"$cli" || dt_fail "the README's CLI table lacks the verb $v"
done
env_sec=$(readme_section Environment)
"$DTRAIND" --help >"$DT_TEST_TMP/dhelp" || dt_fail "dtraind --help failed"
for var in $(cat "$DT_TEST_TMP/help" "$DT_TEST_TMP/dhelp" | grep -oE '\$?\b(TF_CONFIG|DTRAIN_[A-Z_]+|DT_[A-Z_]+)\b' | tr -d '$' | sort -u); do
  grep -q "\`$var\`" <<<"$env_sec" || dt_fail "the README's Environment section lacks $var (named by --help)"
done

# ---- dtrain summary: the README's parameter count and error line ---------------------------------
"$DTRAIN" summary "$DT_SRC_DIR/config/models/fmnist_cnn.json" --json >"$DT_TEST_TMP/summary.json" ||
  dt_fail "dtrain summary fmnist_cnn.json failed"
count=$(grep -oE '`fmnist_cnn.json` \(the Keras tutorial CNN, [0-9,]+ parameters\)' "$README" | grep -oE '[0-9,]+ parameters' | sed 's/[^0-9]//g')
[[ -n $count ]] || dt_fail "the README gives no parameter count for fmnist_cnn.json"
dt_assert_eq "$(dt_json_get total_params "$DT_TEST_TMP/summary.json")" "$count" "fmnist_cnn.json's parameters (README)"
expected=$(grep -E '^    dtrain summary: model.json: ' "$README" | sed -E 's/^ +//')
[[ -n $expected ]] || dt_fail "the README's refused-model line is gone"
cat >"$DT_TEST_TMP/model.json" <<'EOF'
{"class_name": "Sequential", "config": {"name": "s", "layers": [
  {"class_name": "InputLayer", "config": {"name": "in", "batch_input_shape": [null, 8, 8, 2]}},
  {"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": [3, 3],
   "data_format": "channels_first"}}]}}
EOF
rc=0
(cd "$DT_TEST_TMP" && "$DTRAIN" summary model.json) >"$DT_TEST_TMP/refused.out" 2>&1 || rc=$?
dt_assert_eq "$rc" 2 "dtrain summary of an unsupported option"
dt_assert_eq "$(cat "$DT_TEST_TMP/refused.out")" "$expected" "the README's refused-model line"

# ---- make features -------------------------------------------------------------------------------
mk_features() {
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C "$DT_SRC_DIR" \
    BUILD="$DT_TEST_TMP/build" BIN="$DT_BIN_DIR" "$@" features 2>&1
}
fake=$DT_TEST_TMP/fakebin
mkdir -p "$fake"
printf '#!/bin/sh\necho "nvcc: fake"\n' >"$fake/nvcc"
chmod +x "$fake/nvcc"
with=$(PATH="$fake:$PATH" mk_features) || dt_fail "make features (with nvcc) failed: $with"
without=$(mk_features CUDA=0) || dt_fail "make features CUDA=0 failed: $without"
echo "$with"
echo "$without"
for out in "$with" "$without"; do
  [[ $out != *"CUDA build available"* ]] || dt_fail "make features still says 'CUDA build available'"
  [[ $out == *"CPU build"* ]] || dt_fail "make features does not say it is a CPU build: $out"
done
[[ $with == *"nvcc found ($fake/nvcc)"* ]] || dt_fail "make features does not say which nvcc it found: $with"
echo "README and docs OK"
