"""The data of jobs_rnn.sh and jobs_rnn_replicas.sh, written into argv[1]: float sequences
(12 timesteps x 2 features; the class is the third of the sequence a spike falls in) and token
rows of 10 ids padded with 0 (the label: whether token 1 comes before token 2)."""
import random, sys
d = sys.argv[1]
def seqs(name, n, seed):
    r = random.Random(seed)
    with open(f"{d}/{name}", "w") as f:
        f.write(",".join([f"t{t}f{k}" for t in range(12) for k in range(2)] + ["label"]) + "\n")
        for _ in range(n):
            p = r.randrange(12)
            row = []
            for t in range(12):
                row += [r.gauss(0, 0.3) + (2.0 if t == p else 0.0), r.gauss(0, 0.3)]
            f.write(",".join("%.5f" % v for v in row) + f",{p // 4}\n")
def tokens(name, n, seed):
    # the label: whether token 1 comes before token 2 in the sentence (order, not counts)
    r = random.Random(seed)
    with open(f"{d}/{name}", "w") as f:
        f.write(",".join([f"w{i}" for i in range(10)] + ["label"]) + "\n")
        for _ in range(n):
            length = r.randrange(3, 11)
            ids = [r.randrange(3, 20) for _ in range(length)]
            a, b = r.sample(range(length), 2)
            ids[a], ids[b] = 1, 2
            pad = [0] * (10 - length)
            ids = pad + ids if r.random() < 0.5 else ids + pad
            f.write(",".join(map(str, ids)) + f",{int(a < b)}\n")
seqs("train.csv", 1024, 1)
seqs("val.csv", 256, 2)
tokens("tok_train.csv", 1024, 3)
tokens("tok_val.csv", 256, 4)
