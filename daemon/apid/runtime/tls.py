"""Whether an apid process loads TLS and public-key cryptography: the `tls` setting.

pyOpenSSL and cryptography take about 12 MiB of every apid process (docs/benchmarks.md), and
Twisted and PyJWT import them whenever they are installed (`twisted.internet.tcp`,
`posixbase`, `endpoints` and `web.client` to offer TLS connections, `jwt` for RS256 and
ES256), each with a path of its own for an installation without them. With `tls: auto` and
nothing in the configuration using TLS (`uses`), the process goes without: before the reactor
is installed, `leave_out` makes both packages unimportable for the life of the process, each
import of them failing with the setting to change, so every module takes its path without
them. A plugin that uses TLS through Twisted, or cryptography at all, needs `tls: always`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

from apid.config.files import Config

LEFT_OUT = ("OpenSSL", "cryptography")
# `listen` endpoints that are no TLS (a `haproxy:` prefix before any of them included)
PLAIN_LISTEN = ("tcp:", "tcp6:", "unix:", "systemd:")


def uses(config: Config) -> list[str]:
    """What in `config` needs TLS or public-key signatures, in words; none, nothing does."""
    server, api = config.server, config.api
    reasons = []
    if not server.listen.removeprefix("haproxy:").startswith(PLAIN_LISTEN):
        reasons.append("`listen` is a TLS endpoint")
    if any(peer.url.startswith("https:") for peer in server.servers):
        reasons.append("a peer in `servers` is https")
    if any(origin.startswith("https:") for origin in api.allowed_origins):
        reasons.append("webhooks may go to an https origin of `cors.allowedOrigins`")
    if api.security.issuers:
        reasons.append("`security.issuers` names identity providers")
    if server.mail.backend == "smtp":
        reasons.append("mail goes by SMTP (STARTTLS)")
    if server.redis_url is not None:
        reasons.append("Redis's client (txredisapi) imports Twisted's TLS")
    return reasons


def leave_out(config: Config) -> bool:
    """With `tls: auto` and nothing in `config` using TLS, make pyOpenSSL and cryptography
    unimportable in this process, before anything imports them; whether it did."""
    if config.server.tls != "auto" or uses(config) or any(name in sys.modules for name in LEFT_OUT):
        return False
    sys.meta_path.insert(0, _LeftOut())
    return True


class _LeftOut(MetaPathFinder):
    """Refuses the packages of `LEFT_OUT` and their modules, saying why."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] in LEFT_OUT:
            raise ModuleNotFoundError(
                f"{fullname} is left out of this apid process: `tls: auto` and nothing in the configuration "
                "uses TLS; set `tls: always` in service_server.yml for a plugin that needs it",
                name=fullname,
            )
        return None
