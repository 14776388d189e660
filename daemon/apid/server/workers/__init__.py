"""Worker processes (`procCores` above 1): the parent that shares one listening socket among
N workers and keeps them running (`parent`), what a worker gets from it (`worker`), and the
channel between them (`channel`).

This module imports nothing of the daemon: `share_metrics` must run before anything imports
prometheus_client, which reads its multiprocess setting once, on import; and a worker imports
`apid.server.workers.orphans` first of all, before any slow import.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apid.config.files import Config
    from apid.server.workers.versions import Code

METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
PORT_FD = 3  # a worker's copy of the listening socket
CHANNEL_FD = 4  # a worker's end of its channel to the parent


@dataclass(frozen=True)
class WorkerStart:
    """What the parent hands each worker, pickled on its standard input: the configuration it
    loaded and the code it started with (`apid.server.workers.versions`)."""

    config: Config
    code: Mapping[str, Code]


def worker_count(config: Config) -> int:
    """`procCores`, capped at the CPUs this process may run on (taskset and cgroups included)."""
    return max(1, min(config.api.proc_cores, len(os.sched_getaffinity(0))))


def share_metrics() -> str:
    """A fresh folder where the parent and every worker keep their metrics (prometheus_client's
    multiprocess mode), set in the environment the workers inherit; the parent removes it."""
    folder = tempfile.mkdtemp(prefix="apid-metrics-")
    os.environ[METRICS_DIR] = folder
    return folder
