import sys

from apid.server.workers.orphans import guard_worker


def run() -> int:
    guard_worker(sys.argv[1:])  # before the slow imports: a worker never outlives its parent
    from apid.cli.main import main

    return main()


sys.exit(run())
