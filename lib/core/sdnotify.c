#include "core/sdnotify.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

dt_status dt_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return DT_OK;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if (plen >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@'))
        return DT_EINVAL;
    memcpy(sa.sun_path, path, plen);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return DT_EIO;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    close(fd);
    return n < 0 ? DT_EIO : DT_OK;
}

dt_status dt_sd_notifyf(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return dt_sd_notify(buf);
}
