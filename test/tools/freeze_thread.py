#!/usr/bin/env python3
"""freeze_thread.py PID NAME SECONDS - stops one thread of a running process, as a stuck device
or blocked I/O would: ptrace(PTRACE_SEIZE) then PTRACE_INTERRUPT stop only that thread; the
process's other threads (its event loop, heartbeats, the ring's poller) keep running. After
SECONDS (or when this process dies: the kernel detaches a dead tracer's tracees) it runs again.

Prints "frozen TID" once the thread is stopped; exit 77 when ptrace is not allowed here, 1 when
no thread of PID is named NAME."""
import ctypes, os, sys, time

PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000

def main():
    pid, name, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    tids = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                if f.read().strip() == name:
                    tids.append(int(t))
        except OSError:
            pass
    if len(tids) != 1:
        print(f"freeze_thread: {len(tids)} threads of {pid} are named {name!r}", file=sys.stderr)
        return 1
    tid = tids[0]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        e = ctypes.get_errno()
        print(f"freeze_thread: ptrace(SEIZE, {tid}): {os.strerror(e)}", file=sys.stderr)
        return 77
    if libc.ptrace(PTRACE_INTERRUPT, tid, None, None) != 0:
        print(f"freeze_thread: ptrace(INTERRUPT): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    os.waitpid(tid, WALL)
    print(f"frozen {tid}", flush=True)
    time.sleep(secs)
    libc.ptrace(PTRACE_DETACH, tid, None, None)
    print(f"thawed {tid}", flush=True)
    return 0

sys.exit(main())
