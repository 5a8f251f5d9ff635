#!/usr/bin/python3
"""text-prepare.py - real labelled text from Debian for `make demo-text` (Python 3 stdlib only).

The text is every package's one-line description in the APT package lists (`apt-cache dumpavail`,
or a file of deb822 paragraphs with --source), the label its Debian section ("games", "science",
...). Packages are taken in name order, a description met twice (the -data/-common halves of one
program, a description shared by two sections) is kept once or dropped, each section is capped
at --per-class examples drawn with --seed, and the rest is split train/validation/test 80/10/10
with the same seed, so one set of package lists always gives the same files.

Tokens are lowercase words ([a-z0-9]+ with inner ' + . - kept: "c++", "x11", "e-mail"). The
vocabulary is the --vocab most frequent training words (ties by word): id 0 is padding, 1 an
out-of-vocabulary word, 2... the words. Each example is its first --maxlen ids, padded with 0
after the text (Embedding(mask_zero) masks the padding, so the recurrent layer never sees it).

Writes to --out: vocab.txt (line k = the word of id k), labels.txt (line k = the section of label
k), train.csv / val.csv / test.csv (columns t0..t{maxlen-1},label) and meta.json: the counts, the
majority class's test accuracy and a multinomial naive Bayes baseline (bag of words over the
same ids and splits, Laplace smoothing) with its test accuracy.
"""
import argparse
import collections
import json
import math
import os
import random
import re
import subprocess
import sys

DEFAULT_SECTIONS = "admin,games,graphics,mail,math,net,science,sound,text,video"
WORD = re.compile(r"[a-z0-9]+(?:['+.\-][a-z0-9+]+)*\+*")


def paragraphs(text):
    """Yields (package, section, description) of each deb822 paragraph that has all three."""
    for para in text.split("\n\n"):
        fields = {}
        for line in para.split("\n"):
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" in fields and "Section" in fields and "Description" in fields:
            # "contrib/games", "non-free/science": the section is the last part.
            yield fields["Package"], fields["Section"].rsplit("/", 1)[-1], fields["Description"]


def tokens(text):
    return WORD.findall(text.lower())


def naive_bayes(train, test, n_classes, vocab_size):
    """Multinomial naive Bayes on the token ids (padding left out), add-one smoothing."""
    prior = [0] * n_classes
    counts = [[0] * vocab_size for _ in range(n_classes)]
    totals = [0] * n_classes
    for ids, y in train:
        prior[y] += 1
        for t in ids:
            counts[y][t] += 1
            totals[y] += 1
    logp = [[math.log((c + 1) / (totals[y] + vocab_size)) for c in counts[y]] for y in range(n_classes)]
    logprior = [math.log(p / len(train)) if p else -1e30 for p in prior]
    right = 0
    for ids, y in test:
        scores = [logprior[c] + sum(logp[c][t] for t in ids) for c in range(n_classes)]
        right += max(range(n_classes), key=lambda c: scores[c]) == y
    return right / len(test)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--source", help="a file of deb822 paragraphs (default: apt-cache dumpavail)")
    ap.add_argument("--sections", default=DEFAULT_SECTIONS, help="comma-separated Debian sections")
    ap.add_argument("--per-class", type=int, default=2000, help="examples a section at most")
    ap.add_argument("--vocab", type=int, default=8000, help="words in the vocabulary (ids 2...)")
    ap.add_argument("--maxlen", type=int, default=12, help="token ids a row")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    if args.source:
        with open(args.source, encoding="utf-8", errors="replace") as f:
            text = f.read()
    else:
        try:
            text = subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True).stdout.decode(
                "utf-8", "replace")
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit("text-prepare: apt-cache dumpavail failed (%s)" % e)
    sections = [s for s in args.sections.split(",") if s]
    label = {s: k for k, s in enumerate(sections)}

    first = {}  # package -> (section, description): the first paragraph of each package
    for pkg, sec, desc in paragraphs(text):
        first.setdefault(pkg, (sec, desc))
    by_desc = collections.defaultdict(set)
    for pkg, (sec, desc) in first.items():
        by_desc[desc.lower()].add(sec)
    seen = set()
    per = collections.defaultdict(list)
    for pkg in sorted(first):
        sec, desc = first[pkg]
        key = desc.lower()
        if sec not in label or key in seen or len(by_desc[key]) > 1 or not tokens(desc):
            continue
        seen.add(key)
        per[sec].append(desc)
    short = [s for s in sections if len(per[s]) < 20]
    if short:
        sys.exit("text-prepare: too few descriptions in section(s) %s (%d paragraphs read%s)" %
                 (", ".join(short), len(first), "" if first else "; run apt-get update"))

    rng = random.Random(args.seed)
    examples = []
    for sec in sections:
        rows = per[sec]
        if len(rows) > args.per_class:
            rows = rng.sample(rows, args.per_class)
        examples += [(desc, label[sec]) for desc in rows]
    rng.shuffle(examples)
    n_val = n_test = len(examples) // 10
    test, val, train = examples[:n_test], examples[n_test:n_test + n_val], examples[n_test + n_val:]

    freq = collections.Counter(w for desc, _ in train for w in tokens(desc))
    words = sorted(freq, key=lambda w: (-freq[w], w))[:args.vocab]
    ids = {w: k + 2 for k, w in enumerate(words)}

    def encode(split):
        return [([ids.get(w, 1) for w in tokens(desc)][:args.maxlen], y) for desc, y in split]

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "vocab.txt"), "w") as f:
        f.write("\n".join(["<pad>", "<oov>"] + words) + "\n")
    with open(os.path.join(args.out, "labels.txt"), "w") as f:
        f.write("\n".join(sections) + "\n")
    enc = {}
    for name, split in (("train", train), ("val", val), ("test", test)):
        enc[name] = encode(split)
        with open(os.path.join(args.out, name + ".csv"), "w") as f:
            f.write(",".join(["t%d" % t for t in range(args.maxlen)] + ["label"]) + "\n")
            for row, y in enc[name]:
                f.write(",".join(map(str, row + [0] * (args.maxlen - len(row)) + [y])) + "\n")

    n_ids = len(words) + 2
    test_counts = collections.Counter(y for _, y in test)
    meta = {
        "source": args.source or "apt-cache dumpavail",
        "sections": sections,
        "examples": {k: len(v) for k, v in (("train", train), ("val", val), ("test", test))},
        "per_section": {s: len(per[s]) for s in sections},
        "input_dim": n_ids,
        "maxlen": args.maxlen,
        "oov_fraction": sum(t == 1 for r, _ in enc["test"] for t in r) / max(1, sum(len(r) for r, _ in enc["test"])),
        "majority_accuracy": max(test_counts.values()) / len(test),
        "naive_bayes_accuracy": naive_bayes(enc["train"], enc["test"], len(sections), n_ids),
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("text-prepare: %d train, %d validation, %d test descriptions in %d sections, %d ids "
          "(0 padding, 1 OOV); naive Bayes test accuracy %.4f, majority %.4f" %
          (len(train), len(val), len(test), len(sections), n_ids, meta["naive_bayes_accuracy"],
           meta["majority_accuracy"]))


if __name__ == "__main__":
    main()
