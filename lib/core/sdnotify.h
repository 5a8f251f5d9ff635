/*
 * sdnotify.h - the systemd notification protocol (sd_notify), without libsystemd.
 *
 * Under a Type=notify unit, systemd passes NOTIFY_SOCKET; we send "READY=1" once the cluster is
 * formed and "STATUS=..." lines as it changes. Outside systemd these calls do nothing.
 */
#ifndef DT_CORE_SDNOTIFY_H
#define DT_CORE_SDNOTIFY_H

#include "core/status.h"

/* Sends state ("READY=1\nSTATUS=formed") to $NOTIFY_SOCKET; DT_OK when unset. Thread-safe. */
dt_status dt_sd_notify(const char *state);
dt_status dt_sd_notifyf(const char *fmt, ...) DT_PRINTF(1, 2);

#endif
