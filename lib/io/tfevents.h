/*
 * tfevents.h - TensorBoard event files: scalars the chief logs while training.
 *
 *     dt_tfevents *tb;
 *     if (dt_tfevents_open(spec->tensorboard_dir, &tb, &err) != DT_OK) ...   // creates the dir
 *     dt_tfevents_scalar(tb, "epoch_loss", epoch, loss, &err);
 *     dt_tfevents_scalar(tb, "epoch_accuracy", epoch, acc, &err);
 *     dt_tfevents_flush(tb, &err);                                // e.g. at the end of an epoch
 *     dt_tfevents_close(tb);                                      // flushes and fsyncs
 *
 * The file is DIR/events.out.tfevents.<unix_ts>.<hostname> (with ".<pid>.<n>" appended if that
 * name is taken), as TensorFlow names them, so `tensorboard --logdir DIR` finds it. It is a
 * sequence of TFRecords, each
 *
 *     uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
 *
 * (little-endian), whose data is a serialized tensorflow.Event (proto/tfevents.proto has the
 * fields we use, with TensorFlow's numbers). The first record carries file_version
 * "brain.Event:2"; each scalar is an Event {wall_time, step, summary {value {tag, simple_value}}},
 * the form TensorBoard's scalar dashboard reads (as PyTorch's SummaryWriter writes it).
 *
 * Records are buffered in memory and written by dt_tfevents_flush, by dt_tfevents_close, when
 * DT_TFEVENTS_FLUSH_BYTES have piled up, or on the first scalar after DT_TFEVENTS_FLUSH_MS
 * (so a live TensorBoard sees progress without every scalar costing a write). After a failed
 * write the buffered records are dropped (a full disk must not grow memory) and the error is
 * returned; later calls try again.
 *
 * Thread-safety: a writer belongs to one thread at a time (the chief's trainer thread).
 */
#ifndef DT_IO_TFEVENTS_H
#define DT_IO_TFEVENTS_H

#include "core/status.h"

#include <stdint.h>

#define DT_TFEVENTS_FILE_VERSION "brain.Event:2"
#define DT_TFEVENTS_FLUSH_BYTES  (64u << 10)
#define DT_TFEVENTS_FLUSH_MS     5000
#define DT_TFEVENTS_MAX_TAG      1024 /* bytes in one tag */

typedef struct dt_tfevents dt_tfevents;

/* Creates dir (and its parents) if needed, creates a new event file in it and writes the
 * file_version record. On success *out is the caller's (dt_tfevents_close). Errors name the
 * path. */
dt_status dt_tfevents_open(const char *dir, dt_tfevents **out, dt_err *err);
/* Appends a scalar (stored as float32, as TensorBoard keeps it) for tag at step; wall_time is
 * now. tag: non-empty, at most DT_TFEVENTS_MAX_TAG bytes ("epoch_loss", "train/loss").
 * NaN and infinities are written as they are. */
dt_status dt_tfevents_scalar(dt_tfevents *w, const char *tag, int64_t step, double value,
                             dt_err *err);
/* Writes every buffered record to the file (write(2); no fsync). */
dt_status dt_tfevents_flush(dt_tfevents *w, dt_err *err);
/* The event file's path; valid until dt_tfevents_close. */
const char *dt_tfevents_path(const dt_tfevents *w);
/* Flushes, fsyncs and closes; a failure there is logged (there is no one left to tell).
 * NULL-safe. */
void dt_tfevents_close(dt_tfevents *w);

#endif
