"""The API through a client nobody here wrote: openapi-python-client generates a Python client
from the administrator's and from the user's `/openapi.json`, every operation of each and no
warning, and the README's tour runs through them against the real daemon: log in, create,
show, list, update, a stale update's 409 read as the typed problem with `currentVersion`, a
user's own view and 403, an invalid-fields problem, sign-up and sessions, a batch (200 and
207), and chains (a blankchain sent with POST, a postchain and a prechain). The tour as a
client team writes it, in Python (tests/data/python/tour.py) and in TypeScript through
openapi-fetch (tests/data/typescript/tour.ts), type-checks under `mypy --strict` and `tsc
--strict` with no cast and no null check on a field the daemon always sends, and runs.

Generating takes seconds per document: each is generated once per module into a temporary
folder, imported from there (docs/api-docs.md#generated-clients).
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import npm_packages
from harness import ADMIN, REPO, Daemon
from outbox import LINK, Outbox, id_of

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
# What the generator prints when it leaves out an operation or a schema, or cannot type one.
WARNINGS = ("Warning", "Skipping", "Unable to")
TYPESCRIPT = REPO / "tests" / "data" / "typescript"  # the tour in TypeScript, its packages locked
CONFIG = "post_hooks: []\n"  # the generated code is imported, not read: no formatting pass


@dataclass(frozen=True)
class GeneratedClient:
    """A client generated from one caller's document: its package, and the generator's output."""

    package: str
    document: dict[str, Any]
    output: str
    base_url: str

    def module(self, name: str) -> ModuleType:
        """`api.person.person_create`, `models`, `client`, ... of the generated package."""
        return importlib.import_module(f"{self.package}.{name}")

    def call(self, operation: str, **kwargs: Any) -> Any:
        """The answer of `operation` ("person.person_show_by_id"), parsed into its typed model."""
        return self.module(f"api.{operation}").sync_detailed(**kwargs).parsed

    def operations(self) -> int:
        root = Path(self.module("api").__file__).parent
        return sum(1 for path in root.glob("*/*.py") if path.name != "__init__.py")

    def models(self) -> ModuleType:
        return self.module("models")

    def anonymous(self) -> Any:
        return self.module("client").Client(base_url=self.base_url, raise_on_unexpected_status=True)

    def authenticated(self, token: str) -> Any:
        return self.module("client").AuthenticatedClient(
            base_url=self.base_url, token=token, raise_on_unexpected_status=True
        )


def generate(root: Path, name: str, document: dict[str, Any], base_url: str) -> GeneratedClient:
    (root / f"{name}.json").write_text(json.dumps(document))
    (root / "config.yml").write_text(CONFIG)
    done = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(root / f"{name}.json"),
            "--output-path",
            str(root / name),
            "--meta",
            "none",
            "--config",
            str(root / "config.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return GeneratedClient(name, document, output, base_url)


def login(client: GeneratedClient, username: str, password: str) -> str:
    models = client.models()
    answer = client.call(
        "public.post_authenticate",
        client=client.anonymous(),
        body=models.PostAuthenticateBody(username=username, password=password),
    )
    assert isinstance(answer, models.PostAuthenticateResponse200), answer
    return answer.token


@pytest.fixture(scope="module")
def clients(
    daemon: Daemon, admin_token: str, user_token: str, tmp_path_factory
) -> Iterator[dict[str, GeneratedClient]]:
    """The clients generated from the administrator's and the user's document, importable."""
    root = tmp_path_factory.mktemp("generated-clients")
    base_url = f"http://127.0.0.1:{daemon.port}"
    generated = {}
    for role, token in (("admin", admin_token), ("user", user_token)):
        reply = daemon.request("GET", "/openapi.json", token=token)
        assert reply.status == 200, reply.body
        generated[role] = generate(root, f"{role}_client", reply.json, base_url)
    sys.path.insert(0, str(root))
    try:
        yield generated
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name.split(".")[0] in {c.package for c in generated.values()}]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def admin(clients: dict[str, GeneratedClient]) -> Any:
    return clients["admin"].authenticated(login(clients["admin"], *ADMIN[:2]))


@pytest.mark.parametrize("role", ["admin", "user"])
def test_every_operation_is_generated_without_a_warning(clients, role):
    client = clients[role]
    assert not [word for word in WARNINGS if word in client.output], client.output
    operations = sum(len(item) for item in client.document["paths"].values())
    assert client.operations() == operations > 100


def test_the_tour_creates_shows_lists_and_updates_through_the_generated_client(clients, admin):
    api, models = clients["admin"], clients["admin"].models()
    made = api.call(
        "person.person_create",
        client=admin,
        body=models.Person1CreateROLEADMINRequest(username="jdoe", password="s3cret-pass", email="jdoe@example.com"),
    )
    assert isinstance(made, models.Person1CreateROLEADMINOutput)
    assert made.version == 0
    shown = api.call("person.person_show_by_id", client=admin, id=made.id)
    assert isinstance(shown, models.Person1ShowROLEADMINOutput)
    assert (shown.username, shown.email) == ("jdoe", "jdoe@example.com")
    assert api.call("person.person_show", client=admin, id=made.id).username == "jdoe"
    page = api.call("person.person_list", client=admin, offset=0, max_=20)
    assert "jdoe" in [person.username for person in page]
    assert all(isinstance(person, models.Person1ListRecord) for person in page)
    too_long = api.call("person.person_list", client=admin, max_=101)  # the document says 1 to 100
    assert isinstance(too_long, models.InvalidFieldsProblem)
    assert [(error.field, error.reason) for error in too_long.errors] == [("max", "must be 1 to 100")]

    updated = api.call(
        "person.person_update_by_id",
        client=admin,
        id=made.id,
        body=models.PersonUpdateByIdBody(version=0, email="john@example.com"),
    )
    assert (updated.id, updated.version) == (made.id, 1)
    stale = api.call(
        "person.person_update_by_id",
        client=admin,
        id=made.id,
        body=models.PersonUpdateByIdBody(version=0, email="late@example.com"),
    )
    assert isinstance(stale, models.ConflictProblem), stale
    assert (stale.status, stale.current_version) == (409, 1)


def test_a_user_reads_their_own_record_and_is_refused_others(clients, admin):
    api, user = clients["user"], clients["user"].models()
    admin_api, models = clients["admin"], clients["admin"].models()
    made = admin_api.call(
        "person.person_create",
        client=admin,
        body=models.Person1CreateROLEADMINRequest(username="asmith", password="s3cret-pass", email="a@example.com"),
    )
    person = admin_api.call("person.person_list", client=admin, offset=0, max_=100)
    ids = {record.username: record.id for record in person}
    asmith = api.authenticated(login(api, "asmith", "s3cret-pass"))
    own = api.call("person.person_show_by_id", client=asmith, id=made.id)
    assert isinstance(own, user.Person1ShowOutput)
    assert own.to_dict() == {"id": made.id, "version": 0, "username": "asmith", "email": "a@example.com"}
    refused = api.call("person.person_show_by_id", client=asmith, id=ids[ADMIN[0]])
    assert isinstance(refused, user.ForbiddenProblem)
    assert refused.status == 403


def test_errors_are_typed_problems(clients, admin):
    api, models = clients["admin"], clients["admin"].models()
    invalid = api.call(
        "person.person_create",
        client=admin,
        body=models.Person1CreateROLEADMINRequest(username="x", password="s3cret-pass", email="nope"),
    )
    assert isinstance(invalid, models.InvalidFieldsProblem), invalid
    assert [error.field for error in invalid.errors] == ["email", "username"]
    missing = api.call("person.person_show_by_id", client=api.anonymous(), id=1)
    assert isinstance(missing, models.UnauthorizedProblem)
    unknown = api.call("person.person_show_by_id", client=admin, id=999_999)
    assert isinstance(unknown, models.NotFoundProblem)


# the generated /refreshToken sends its cookie parameter per request, which httpx deprecates
@pytest.mark.filterwarnings("ignore:Setting per-request cookies:DeprecationWarning")
def test_signing_up_staying_logged_in_and_logging_out(clients, daemon):
    api, models = clients["user"], clients["user"].models()
    outbox = Outbox(daemon.deployment)
    anonymous = api.anonymous()
    said = api.call(
        "public.post_register",
        client=anonymous,
        body=models.PostRegisterBody(username="zoe", password="zoe-password-1", email="zoe@example.com"),
    )
    assert "validation email" in said
    (link,) = LINK.findall(outbox.wait("zoe@example.com")[0].get_content())
    validated = api.module("api.public.get_validate").sync_detailed(client=anonymous, id=id_of(link))
    assert validated.status_code == 302
    # the login sets the refresh cookie, which /refreshToken takes back with the token
    logging_in = api.anonymous()
    token = api.call(
        "public.post_authenticate",
        client=logging_in,
        body=models.PostAuthenticateBody(username="zoe", password="zoe-password-1"),
    ).token
    cookie = logging_in.get_httpx_client().cookies["apid_refresh"]
    refreshed = api.call("public.get_refresh_token", client=api.authenticated(token), name="zoe", apid_refresh=cookie)
    assert refreshed.token != token
    zoe = api.authenticated(refreshed.token)
    claims = json.loads(base64.urlsafe_b64decode(refreshed.token.split(".")[1] + "=="))
    assert api.call("person.person_show_by_id", client=zoe, id=int(claims["sub"])).username == "zoe"
    ended = api.module("api.public.post_logout").sync_detailed(client=zoe)
    assert ended.status_code == 204
    assert isinstance(
        api.call("person.person_show_by_id", client=zoe, id=int(claims["sub"])), models.UnauthorizedProblem
    )


def test_a_batch_answers_every_output_or_reports_the_failed_elements(clients, admin):
    api, models = clients["admin"], clients["admin"].models()
    people = api.call("person.person_list", client=admin, offset=0, max_=2)
    first, second = (person.id for person in people)
    element = models.Person1ShowROLEADMINRequest
    both = api.call(
        "batch.person_show_batch",
        client=admin,
        body=models.PersonShowBatchBody(batch=[element(id=first), element(id=second)], combine=True),
    )
    assert [person.id for person in both] == [first, second]
    last = api.call(
        "batch.person_show_batch",
        client=admin,
        body=models.PersonShowBatchBody(batch=[element(id=first), element(id=second)]),
    )
    assert last.id == second
    partly = api.call(
        "batch.person_show_batch",
        client=admin,
        body=models.PersonShowBatchBody(batch=[element(id=first), element(id=999_999)], combine=True),
    )
    assert isinstance(partly, models.PersonShowBatchResponse207)
    assert [error.index for error in partly.errors] == [1]
    assert partly.data[1] is None and partly.data[0].id == first


def test_chains_run_through_the_generated_client(clients, admin):
    api, models = clients["admin"], clients["admin"].models()
    leader = api.call(
        "person.person_create",
        client=admin,
        body=models.Person1CreateROLEADMINRequest(username="lead", password="s3cret-pass", email="l@example.com"),
    ).id
    team = api.call("team.team_create", client=admin, body=models.Team1CreateRequest(name="Core", leader_id=leader))
    link = models.ChainLink
    # blankchain, sent with POST (which fetch can send a body with): the team, then its leader
    blank = api.call(
        "chain.team_show_chain_post",
        client=admin,
        id=team.id,
        body=models.TeamShowChainPostBody(
            chain=models.BlankChain(
                key="leaderId",
                type_=models.BlankChainType.BLANKCHAIN,
                combine=True,
                order=[link(link=models.ChainLinkLink.PERSONSHOW, key="return")],
            )
        ),
    )
    # every link's output: a list of any JSON, each item read whole (a record, a list of them or null)
    assert isinstance(blank[0], dict) and isinstance(blank[1], dict)
    assert (blank[0]["id"], blank[1]["id"], blank[1]["username"]) == (team.id, leader, "lead")
    # postchain (GET > PUT): the team, then update its leader with the body's fields, typed
    body = models.TeamShowChainPutBody(
        chain=models.PostChain(
            key="leaderId",
            type_=models.PostChainType.POSTCHAIN,
            order=[link(link=models.ChainLinkLink.PERSONUPDATE, key="return")],
        ),
        email="lead@example.com",
    )
    updated = api.call("chain.team_show_chain_put", client=admin, id=team.id, body=body)
    assert updated["id"] == leader
    # prechain (POST > GET): create a team, then show its leader
    created = api.call(
        "chain.team_create_chain",
        client=admin,
        body=models.TeamCreateChainBody(
            name="Ops",
            leader_id=leader,
            chain=models.PreChain(
                key="leaderId",
                type_=models.PreChainType.PRECHAIN,
                order=[link(link=models.ChainLinkLink.PERSONSHOW, key="return")],
            ),
        ),
    )
    assert created["email"] == "lead@example.com"


MYPY_CONFIG = """[mypy]
strict = True
# the generated package's own code is the generator's, not the client team's
[mypy-admin_client.*]
ignore_errors = True
"""


def test_the_tour_type_checks_under_mypy_strict_and_runs_against_the_daemon(clients, daemon):
    """tests/data/python/tour.py: `id`, `version`, `username`, a key's `key` and a hook's `secret`
    read plainly, If-Match and its 412 typed; no cast, no null check (Done when of issue 36)."""
    root = Path(clients["admin"].module("client").__file__).parents[1]
    tour = REPO / "tests" / "data" / "python" / "tour.py"
    (root / "mypy.ini").write_text(MYPY_CONFIG)
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(root / "mypy.ini"),
            "--cache-dir",
            str(root / ".mypy"),
            str(tour),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(root)},
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run(
        [sys.executable, str(tour), f"http://127.0.0.1:{daemon.port}", *ADMIN[:2]],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=120,
    )
    assert ran.returncode == 0 and "tour done" in ran.stdout, ran.stdout + ran.stderr


def test_the_tour_compiles_under_tsc_strict_and_runs_against_the_daemon(daemon, admin_token):
    """tests/data/typescript/tour.ts, through openapi-fetch with the types openapi-typescript
    makes of the administrator's document: `number` ids and versions, a key's `string`, an
    If-Match header and its 412, a chain POSTed (Done when of issue 36)."""
    home = npm_packages.installed(TYPESCRIPT, REPO / "tests" / "output" / "sdk-tour", "tour.ts", "tsconfig.json")
    reply = daemon.request("GET", "/openapi.json", token=admin_token)
    (home / "openapi.json").write_text(json.dumps(reply.json))
    tools = home / "node_modules" / ".bin"
    for step in (
        [str(tools / "openapi-typescript"), "openapi.json", "-o", "admin.d.ts"],
        [str(tools / "tsc"), "-p", "tsconfig.json"],
        ["node", "out/tour.js", f"http://127.0.0.1:{daemon.port}", *ADMIN[:2]],
    ):
        done = subprocess.run(step, cwd=home, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{step[0]}:\n{done.stdout}{done.stderr}"
    assert "tour done" in done.stdout


OPENAPI_GENERATOR = Path(sys.executable).with_name("openapi-generator-cli")
PACKAGE = ("--additional-properties=packageName=ogclient",)
OPENAPI_GENERATOR_READS = """
import json, sys
import ogclient
from ogclient.models.chain_answer import ChainAnswer

base_url, token, chained = sys.argv[1], sys.argv[2], sys.argv[3]
client = ogclient.ApiClient(ogclient.Configuration(host=base_url, access_token=token))
person = ogclient.PersonApi(client).person_show_by_id(1)
assert (person.id, person.version >= 0, person.username) == (1, True, "admin"), person
answer = ChainAnswer.from_json(chained).actual_instance
assert answer == json.loads(chained) and isinstance(answer[1], list), answer  # a record, then a list
print("read")
"""


def test_openapi_generator_reads_the_document_and_keeps_a_chains_answer_whole(daemon, admin_token, tmp_path):
    """openapi-generator's Python client (a Java tool: its jar from PyPI, Java from Debian)
    imports with the document's webhooks in it (they are `x-internal`), types a record, and
    keeps every member of a chain answer that holds a record, a list and null."""
    reply = daemon.request("GET", "/openapi.json", token=admin_token)
    (tmp_path / "openapi.json").write_text(json.dumps(reply.json))
    generated = subprocess.run(
        [str(OPENAPI_GENERATOR), "generate", "-i", "openapi.json", "-g", "python", "-o", "client", *PACKAGE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert generated.returncode == 0, generated.stdout[-3000:] + generated.stderr[-3000:]
    daemon.request("POST", "/v0.1/team/create", {"name": "Generated", "leaderId": 1}, token=admin_token)
    # the administrator, then the teams they lead (team's FKEY leaderId names person.id)
    chain = {"chain": {"key": "id", "type": "blankchain", "combine": True, "order": {"team/list": "return"}}}
    chained = daemon.request("POST", "/c0.1/person/show/1", chain, token=admin_token)
    assert chained.status == 200, chained.body
    read = subprocess.run(
        [sys.executable, "-c", OPENAPI_GENERATOR_READS, f"http://127.0.0.1:{daemon.port}", admin_token, chained.body],
        cwd=tmp_path / "client",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert read.returncode == 0 and "read" in read.stdout, read.stdout + read.stderr
