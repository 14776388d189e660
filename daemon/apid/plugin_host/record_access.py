"""Who may receive a copy of a record that leaves apid other than as the answer to its own call:
a webhook event today, the live event stream next. One decision for every such copy, the one
the action declared for its records (`@action(may_see=...)`), so that no copy shows a record to
someone a read of it would refuse (person/show answers bob 403 for alice's record: so does
every copy of it).

- The action declares `may_see(caller, record)`: it decides, given the receiver as a `Caller`
  (the roles the endpoint grants it) and the record as the action answered it, before any field
  filtering. An error in it, or an answer other than true, is a no (logged: a plugin's bug).
- It declares none but is `caller_independent`: every holder of the endpoint's roles may, as any
  of them calling the action would have been answered the same record.
- It declares neither: administrators only (`superuserRole`). IO State may give such an
  action's HOOK no other role (`apid.iostate.check_hook_roles`).

An endpoint not bound to its action's declarations (`Endpoint.audience` None) sends nobody a copy.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from apid.iostate import Endpoint
from apid.plugin import Caller

log = Logger(namespace="apid.record_access")


def receiver(endpoint: Endpoint, user_id: int, username: str, roles: frozenset[str]) -> Caller:
    """The account a copy would go to (a hook's owner), as the endpoint would see it calling."""
    granted = endpoint.granted(roles)
    audience = endpoint.audience
    superuser = audience is not None and audience.superuser_role in granted
    return Caller(id=user_id, username=username, roles=granted, is_superuser=superuser, all_roles=roles)


def may_receive(endpoint: Endpoint, receiver: Caller, record: Any) -> bool:
    """Whether `receiver` may be sent a copy of `record`, which `endpoint`'s action answered."""
    audience = endpoint.audience
    if audience is None:
        return False
    if audience.may_see is None:
        return audience.caller_independent or receiver.is_superuser
    try:
        return audience.may_see(receiver, record) is True
    except Exception:
        log.failure(
            "the may_see check of {endpoint} failed for person {person}: they are sent no copy of the record",
            endpoint=endpoint.path,
            person=receiver.id,
        )
        return False
