"""The README's tour as a client team writes it against the Python SDK openapi-python-client
generates from the administrator's `/openapi.json` (package `admin_client`): typed under
`mypy --strict` with no cast and no null check on a field the daemon always sends, and run
against the real daemon (tests/integration/test_generated_client.py).

Each answer is a union of the 200's model and the problems the operation lists: one
`isinstance` of the model it expects narrows it, as a client would write `if not ok: raise`.
What follows reads `id`, `version`, `username`, `key`, `secret` plainly.

    python tour.py http://127.0.0.1:8080 admin admin-password
"""

from __future__ import annotations

import sys
from typing import TypeVar

from admin_client.api.apikey import apikey_create
from admin_client.api.batch import person_show_batch
from admin_client.api.chain import team_create_chain, team_show_chain_post
from admin_client.api.hook import hook_create
from admin_client.api.person import person_create, person_list, person_show_by_id, person_update_by_id
from admin_client.api.public import post_authenticate
from admin_client.api.team import team_create
from admin_client.client import AuthenticatedClient, Client
from admin_client.models import (
    Apikey1CreateROLEADMINOutput,
    Apikey1CreateROLEADMINRequest,
    BlankChain,
    BlankChainType,
    ChainLink,
    ChainLinkLink,
    ChainOutput,
    ConflictProblem,
    Hook1CreateOutput,
    Hook1CreateRequest,
    Person1CreateROLEADMINOutput,
    Person1CreateROLEADMINRequest,
    Person1ListRecord,
    Person1ShowROLEADMINOutput,
    Person1UpdateROLEADMINOutput,
    PersonShowBatchBody,
    PersonUpdateByIdBody,
    PostAuthenticateBody,
    PostAuthenticateResponse200,
    PreChain,
    PreChainType,
    PreconditionFailedProblem,
    Team1CreateOutput,
    Team1CreateRequest,
    TeamCreateChainBody,
    TeamShowChainPostBody,
)

T = TypeVar("T")


def expect(answer: object, kind: type[T]) -> T:
    """The answer as the model `kind`, or the problem it is, raised."""
    if not isinstance(answer, kind):
        raise SystemExit(f"expected {kind.__name__}, got {answer!r}")
    return answer


def tour(base_url: str, username: str, password: str) -> None:
    login = post_authenticate.sync(
        client=Client(base_url=base_url), body=PostAuthenticateBody(username=username, password=password)
    )
    api = AuthenticatedClient(base_url=base_url, token=expect(login, PostAuthenticateResponse200).token)

    # create, show, list: id, version and every field the roles see, typed plainly
    made = expect(
        person_create.sync(
            client=api,
            body=Person1CreateROLEADMINRequest(username="tourist", password="s3cret-pass", email="tourist@example.com"),
        ),
        Person1CreateROLEADMINOutput,
    )
    person_id: int = made.id
    version: int = made.version
    shown = person_show_by_id.sync_detailed(person_id, client=api)
    record = expect(shown.parsed, Person1ShowROLEADMINOutput)
    name: str = record.username
    locked: bool = record.account_locked
    roles: list[str] = record.roles
    etag = shown.headers["ETag"]
    page = expect(person_list.sync(client=api, offset=0, max_=20), list)
    usernames = [expect(person, Person1ListRecord).username for person in page]
    assert name in usernames and not locked and roles == ["ROLE_USER"]

    # update with optimistic locking; a stale version is a typed 409 with the current one
    updated = expect(
        person_update_by_id.sync(person_id, client=api, body=PersonUpdateByIdBody(version=version, email="j@x.org")),
        Person1UpdateROLEADMINOutput,
    )
    stale = person_update_by_id.sync(person_id, client=api, body=PersonUpdateByIdBody(version=version, email="z@x.org"))
    # (currentVersion is there for a stale version only, not for a name taken: not always sent)
    assert expect(stale, ConflictProblem).current_version == updated.version == version + 1
    # If-Match with the ETag read before that update: a typed 412, nothing changed
    refused = person_update_by_id.sync(person_id, client=api, body=PersonUpdateByIdBody(enabled=False), if_match=etag)
    assert expect(refused, PreconditionFailedProblem).status == 412

    # a batch: every output, in order
    both = person_show_batch.sync(
        client=api, body=PersonShowBatchBody.from_dict({"batch": [{"id": 1}, {"id": person_id}], "combine": True})
    )
    assert [expect(one, Person1ShowROLEADMINOutput).id for one in expect(both, list)] == [1, person_id]

    # chains, POSTed: a team, then its leader; a new team, then its leader
    team = expect(
        team_create.sync(client=api, body=Team1CreateRequest(name="Core", leader_id=person_id)), Team1CreateOutput
    )
    team_id: int = team.id
    blank = team_show_chain_post.sync(
        team_id,
        client=api,
        body=TeamShowChainPostBody(
            chain=BlankChain(
                key="leaderId",
                type_=BlankChainType.BLANKCHAIN,
                order=[ChainLink(link=ChainLinkLink.PERSONSHOW, key="return")],
            )
        ),
    )
    assert expect(blank, ChainOutput)["username"] == "tourist"
    pre = team_create_chain.sync(
        client=api,
        body=TeamCreateChainBody(
            name="Ops",
            leader_id=person_id,
            chain=PreChain(
                key="leaderId",
                type_=PreChainType.PRECHAIN,
                order=[ChainLink(link=ChainLinkLink.PERSONSHOW, key="return")],
            ),
        ),
    )
    assert expect(pre, ChainOutput)["id"] == person_id

    # a webhook's signing secret and an API key: shown once, always there
    hook = expect(
        hook_create.sync(client=api, body=Hook1CreateRequest(url="http://127.0.0.1:3000/hooks", service="person")),
        Hook1CreateOutput,
    )
    secret: str = hook.secret
    key = expect(
        apikey_create.sync(
            client=api,
            body=Apikey1CreateROLEADMINRequest(name="ci", roles=["ROLE_ADMIN"], current_password=password),
        ),
        Apikey1CreateROLEADMINOutput,
    )
    token: str = key.key
    print(f"tour done: person {person_id}, team {team_id}, hook {hook.id} ({len(secret)}), key {token[:8]}")


if __name__ == "__main__":
    tour(*sys.argv[1:4])
