"""A worker never outlives its parent: on Linux the kernel sends it SIGTERM when the parent
ends (`PR_SET_PDEATHSIG`), whatever process group it is in and however stuck its start-up is
(before its reactor runs, SIGTERM's default action ends it at once). Its reactor's SIGTERM
handler then sees the parent gone and stops in a hurry (`apid.server.shutdown`), as it does when
its channel to the parent is lost.

The signal is asked for by the worker itself, after its parent started it: a parent that ended
in between sends nothing, so the worker checks that its parent is still the one that started it
(`--parent`). It does so first of all, in `python -m apid`, before the imports of a start-up,
which take a second on a loaded machine.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_GONE_SECONDS = 1.0  # what a worker whose parent is gone gives its requests in flight


def guard_worker(args: list[str]) -> None:
    """For `apid worker ... --parent PID`: ask for the signal now, and end now if that parent is
    gone already. Any other command, or a command line argparse will refuse, passes."""
    if args[:1] != ["worker"] or "--parent" not in args:
        return
    try:
        parent = int(args[args.index("--parent") + 1])
    except (IndexError, ValueError):
        return
    if not end_with_parent(parent):
        print(f"apid: worker: its parent (pid {parent}) ended before it started", file=sys.stderr)
        sys.exit(1)


def end_with_parent(parent: int) -> bool:
    """Have the kernel signal this process when `parent` ends; False if it has ended already."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return not orphaned(parent)


def orphaned(parent: int) -> bool:
    """Whether `parent`, which started this process, is gone (it was reparented)."""
    return os.getppid() != parent
