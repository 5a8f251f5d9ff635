#!/usr/bin/python3
"""Loads a log dir written by test io_tfe_tensorboard_reads_it with TensorBoard's own loader.

  tfevents_ref.py LOGDIR    expects scalar "epoch_loss" = 1/(step+1) for steps 0..4
Exit status: 0 ok, 1 mismatch (printed).
"""
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = acc.Tags().get("scalars", [])
if "epoch_loss" not in tags:
    print("MISMATCH: no epoch_loss scalar; tags:", acc.Tags())
    sys.exit(1)
got = [(e.step, e.value) for e in acc.Scalars("epoch_loss")]
want = [(s, 1.0 / (s + 1)) for s in range(5)]
if len(got) != len(want) or any(g[0] != w[0] or abs(g[1] - w[1]) > 1e-6 for g, w in zip(got, want)):
    print("MISMATCH:", got, "!=", want)
    sys.exit(1)
sys.exit(0)
