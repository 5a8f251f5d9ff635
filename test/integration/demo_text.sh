#!/usr/bin/env bash
# timeout: 150
# `make demo-text` in its quick mode (DEMO_TEXT_QUICK=1: 4 Debian sections, 300 package
# descriptions each, 6 epochs) on 2 daemons: the Embedding(mask_zero) -> Bidirectional(LSTM) job
# succeeds and its test accuracy, printed next to the naive Bayes baseline's, beats the majority
# class by a wide margin. Before that, scripts/text-prepare.py on a hand-written set of deb822
# paragraphs: the section's last part is the label, a description shared by two sections is
# dropped and one met twice kept once, words are lowercased, the vocabulary counts training words
# only (ids from 2; 0 padding, 1 OOV) and every row is maxlen ids padded with 0 plus its label.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[[ -x $PY ]] || dt_skip "/usr/bin/python3 is missing"

# --- the prepare step on known paragraphs ---
mkdir -p "$DT_TEST_TMP/small"
"$PY" - "$DT_TEST_TMP/small/src" <<'PY'
import random, sys
r = random.Random(3)
words = {"games": "puzzle arcade chess game board strategy", "sound": "audio mixer midi synth sound music"}
paras = []
for sec, ws in words.items():
    for k in range(30):
        w = ws.split()
        paras.append(f"Package: {sec}-{k:02d}\nSection: {'contrib/' if k % 5 == 0 else ''}{sec}\n"
                     f"Description: {' '.join(r.choice(w).upper() if k % 7 == 0 else r.choice(w) for _ in range(3 + k % 4))} C++ e-mail\n")
# one text in two sections: dropped; one text twice in a section: kept once
paras.append("Package: zz-a\nSection: games\nDescription: Shared words here\n")
paras.append("Package: zz-b\nSection: sound\nDescription: shared words here\n")
paras.append("Package: zz-c\nSection: sound\nDescription: Twice told tale\n")
paras.append("Package: zz-d\nSection: sound\nDescription: twice told tale\n")
paras.append("Package: zz-e\nSection: admin\nDescription: not a chosen section\n")
open(sys.argv[1], "w").write("\n".join(paras))
PY
"$PY" "$DT_SRC_DIR/scripts/text-prepare.py" --source "$DT_TEST_TMP/small/src" --out "$DT_TEST_TMP/small" \
  --sections games,sound --maxlen 5 --vocab 10 --seed 4 || dt_fail "text-prepare on the sample"
"$PY" - "$DT_TEST_TMP/small" <<'PY' || dt_fail "the prepared sample"
import json, sys
d = sys.argv[1]
m = json.load(open(f"{d}/meta.json"))
vocab = open(f"{d}/vocab.txt").read().split("\n")[:-1]
assert vocab[:2] == ["<pad>", "<oov>"] and len(vocab) == 12, vocab
assert all(w == w.lower() for w in vocab), vocab
assert "c++" in vocab and "e-mail" in vocab, vocab  # inner '-' and a trailing '+' stay in the word
assert open(f"{d}/labels.txt").read() == "games\nsound\n"
assert m["per_section"] == {"games": 30, "sound": 31}, m  # "shared" dropped, "twice" kept once
assert sum(m["examples"].values()) == 61, m
for split in ("train", "val", "test"):
    lines = open(f"{d}/{split}.csv").read().split("\n")[:-1]
    assert lines[0] == "t0,t1,t2,t3,t4,label", lines[0]
    assert len(lines) - 1 == m["examples"][split], (split, len(lines))
    for line in lines[1:]:
        v = list(map(int, line.split(",")))
        ids, y = v[:-1], v[-1]
        assert len(ids) == 5 and y in (0, 1) and all(0 <= t < 12 for t in ids), line
        n = sum(t != 0 for t in ids)
        assert ids[n:] == [0] * (5 - n) and n > 0, line  # padding after the text only
print("ok: the prepared sample", m["examples"])
PY

# --- the quick demo on 2 daemons ---
[[ $(apt-cache dumpavail 2>/dev/null | grep -c '^Package:') -ge 2000 ]] ||
  dt_skip "the APT package lists are missing (apt-get update)"
dt_on_exit "$DT_SRC_DIR/scripts/local-cluster.sh stop --dir $DT_TEST_TMP/demo >/dev/null 2>&1"
DEMO_TEXT_QUICK=1 DT_DEMO_DIR=$DT_TEST_TMP/demo DT_BIN_DIR=$DT_BIN_DIR \
  bash "$DT_SRC_DIR/scripts/demo-text.sh" >"$DT_TEST_TMP/demo.out" 2>&1 ||
  { tail -30 "$DT_TEST_TMP/demo.out"; dt_fail "make demo-text (quick) failed"; }
tail -3 "$DT_TEST_TMP/demo.out"
last=$(tail -1 "$DT_TEST_TMP/demo.out")
dt_assert_contains "$last" "test accuracy: " "the demo's last line"
"$PY" - "$DT_TEST_TMP/demo" <<'PY' || dt_fail "the quick demo's accuracy"
import json, sys
d = sys.argv[1]
e, m = json.load(open(f"{d}/evaluate.json")), json.load(open(f"{d}/data/meta.json"))
assert m["sections"] == ["games", "science", "sound", "net"] and m["examples"]["test"] == 120, m
assert e["examples"] == m["examples"]["test"], (e, m)
# 4 classes of 300: the majority is about 0.3; a model that learned the words is far above (0.8).
assert e["accuracy"] >= m["majority_accuracy"] + 0.3, (e, m)
assert m["naive_bayes_accuracy"] >= m["majority_accuracy"] + 0.3, m
print("ok: test accuracy %.4f, naive Bayes %.4f, majority %.4f" %
      (e["accuracy"], m["naive_bayes_accuracy"], m["majority_accuracy"]))
PY
[[ ! -e $DT_TEST_TMP/demo/worker-0.pid ]] || ! pgrep -F "$DT_TEST_TMP/demo/worker-0.pid" >/dev/null ||
  dt_fail "the demo left a daemon running"
echo "ok: the text demo's quick mode learns Debian's sections on 2 daemons"
