#!/usr/bin/env python3
"""How long `ApidDaemon.start()` takes with the two accounts of the `apid_daemon` fixture: from
a migrated template database (apid.testing.template, the default for the kit's own SQLite
file) and by commands (`apid migrate`, one `apid user add` per account), as a daemon with a
`PYTHONPATH` of its own still starts. Three starts of each, in seconds.

    .venv/bin/python scripts/bench_kit_start.py
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from apid.testing import ApidDaemon
from apid.testing.daemon import default_accounts


def started_in(**options: object) -> float:
    began = time.monotonic()
    daemon = ApidDaemon(Path(tempfile.mkdtemp(prefix="apid-kit-start-")), accounts=default_accounts(), **options)
    daemon.start()
    took = time.monotonic() - began
    daemon.stop()
    return took


def main() -> None:
    from_template = [started_in() for _ in range(3)]
    by_commands = [started_in(env={"PYTHONPATH": os.environ.get("PYTHONPATH") or os.devnull}) for _ in range(3)]
    print("from the template:", ", ".join(f"{seconds:.2f}" for seconds in from_template))
    print("by commands:      ", ", ".join(f"{seconds:.2f}" for seconds in by_commands))


if __name__ == "__main__":
    main()
