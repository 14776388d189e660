"""The stack's ceiling for scripts/bench (issue 16): bare twisted.web answering `GET /` with a
small static JSON, no routing, no token, no database; what any server on Twisted's HTTP
parsing can reach on one core.

    python scripts/anchors/twisted_static.py --port N
"""

from __future__ import annotations

import argparse

from twisted.internet import reactor
from twisted.web.resource import Resource
from twisted.web.server import Site
from twisted.web.static import Data


class QuietSite(Site):
    def log(self, request) -> None:
        """No access log, as apid runs in the benchmark (`accessLog: false`)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    root = Resource()
    root.putChild(b"", Data(b'{"status":"pass"}', "application/json"))
    reactor.listenTCP(port, QuietSite(root), interface="127.0.0.1")
    reactor.run()


if __name__ == "__main__":
    main()
