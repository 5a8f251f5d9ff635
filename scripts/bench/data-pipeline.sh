#!/usr/bin/env bash
# data-pipeline.sh - input pipeline throughput on Fashion-MNIST (batches of 64 by default):
# reading is done once up front; what is timed is shard -> shuffle -> batch (uint8 -> float32)
# on the prefetch thread, handed to a consumer that does no work (the ceiling), then to one
# that spins --work-us per batch (a stand-in for the trainer) to show the thread overlaps it.
# Usage: scripts/bench/data-pipeline.sh [BATCH] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/../.."
F=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
B=${1:-64}
E=${2:-5}
[[ -x bin/dtrain ]] || make -s bin/dtrain
IMG=$F/train-images-idx3-ubyte.gz
LAB=$F/train-labels-idx1-ubyte.gz
echo "== prefetch thread (depth 2), full shuffle, batch $B, $E epochs"
bin/dtrain data bench "$IMG" "$LAB" --batch "$B" --epochs "$E" --shuffle --prefetch 2
echo "== no prefetch thread (batches made on the consumer's thread)"
bin/dtrain data bench "$IMG" "$LAB" --batch "$B" --epochs "$E" --shuffle --prefetch 0
echo "== 4 replicas, DATA sharding, replica 0 (global batch $((B * 4)))"
bin/dtrain data bench "$IMG" "$LAB" --batch $((B * 4)) --replicas 4 --epochs "$E" --shuffle
echo "== with 500 us of simulated compute per batch: prefetch 2 vs 0 (overlap)"
bin/dtrain data bench "$IMG" "$LAB" --batch "$B" --epochs 1 --shuffle --prefetch 2 --work-us 500
bin/dtrain data bench "$IMG" "$LAB" --batch "$B" --epochs 1 --shuffle --prefetch 0 --work-us 500
