#!/usr/bin/env python3
"""freeze_thread.py PID NAME SECONDS - stops one thread of a running process, as a stuck device
or blocked I/O would: ptrace(PTRACE_SEIZE) then PTRACE_INTERRUPT stop only that thread; the
process's other threads (its event loop, heartbeats, the ring's poller) keep running. After
SECONDS (or when this process dies: the kernel detaches a dead tracer's tracees) it runs again.

A thread stopped at an arbitrary instruction may hold a lock its process shares (a mutex of the
ring, malloc's arena, glibc's time-zone lock): then the whole process stops, which is a dead
host, not a hung trainer. A stuck device call or blocked read holds none of those, so the thread
is only kept stopped while it sleeps on a condition variable (futex FUTEX_WAIT_BITSET, which
pthread_cond_*wait uses and a mutex wait does not); otherwise it is let go and caught again a
moment later.

Prints "frozen TID" once the thread is stopped; exit 77 when ptrace is not allowed here, 1 when
no thread of PID is named NAME or it never sleeps on a condition variable within 20 s."""
import ctypes, os, random, sys, time

PTRACE_CONT, PTRACE_GETREGS, PTRACE_DETACH = 7, 12, 17
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
WALL = 0x40000000
SYS_FUTEX, FUTEX_CMD_MASK, FUTEX_WAIT_BITSET = 202, 0x7F, 9
# struct user_regs_struct on x86_64: 27 unsigned longs; these are the indexes used here.
REG_RSI, REG_ORIG_RAX = 13, 15


def thread_named(pid, name):
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
        return None
    return tids[0]


def main():
    pid, name, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    if os.uname().machine != "x86_64":
        print("freeze_thread: reads x86_64 registers only", file=sys.stderr)
        return 77
    tid = thread_named(pid, name)
    if tid is None:
        return 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        e = ctypes.get_errno()
        print(f"freeze_thread: ptrace(SEIZE, {tid}): {os.strerror(e)}", file=sys.stderr)
        return 77
    regs = (ctypes.c_ulong * 27)()
    deadline = time.monotonic() + 20
    while True:
        if libc.ptrace(PTRACE_INTERRUPT, tid, None, None) != 0:
            print(f"freeze_thread: ptrace(INTERRUPT): {os.strerror(ctypes.get_errno())}",
                  file=sys.stderr)
            return 1
        os.waitpid(tid, WALL)
        if libc.ptrace(PTRACE_GETREGS, tid, None, ctypes.byref(regs)) != 0:
            print(f"freeze_thread: ptrace(GETREGS): {os.strerror(ctypes.get_errno())}",
                  file=sys.stderr)
            return 1
        if (regs[REG_ORIG_RAX] == SYS_FUTEX and
                regs[REG_RSI] & FUTEX_CMD_MASK == FUTEX_WAIT_BITSET):
            break
        if time.monotonic() > deadline:
            print(f"freeze_thread: thread {tid} never slept on a condition variable in 20 s",
                  file=sys.stderr)
            return 1
        libc.ptrace(PTRACE_CONT, tid, None, None)
        time.sleep(random.uniform(0.0005, 0.003))
    print(f"frozen {tid}", flush=True)
    time.sleep(secs)
    libc.ptrace(PTRACE_DETACH, tid, None, None)
    print(f"thawed {tid}", flush=True)
    return 0


sys.exit(main())
