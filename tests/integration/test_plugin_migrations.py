"""A plugin with tables of its own (docs/examples/apid-directory), installed as an operator
installs one: `apid migrate` creates apid's schema and then the plugin's, `--status` tells what
is pending, `serve` refuses a database behind its plugins when it may not migrate, and the
plugin's controllers keep their records in their tables, which reference apid's.

The plugin is installed once for the module (pip, offline, from a copy) into a virtualenv
layered over the checkout's (tests/shell_docs.py `layered_venv`), so the rest of the suite
never sees it.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from harness import ADMIN, ADMIN_ACCOUNT, REPO, Daemon, Deployment, V, deployment_with_accounts, new_person
from shell_docs import OFFLINE_PIP, layered_venv

EXAMPLE = REPO / "docs" / "examples" / "apid-directory"


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    """The interpreter of a virtualenv with apid-directory installed (a wheel: what it ships)."""
    root = tmp_path_factory.mktemp("directory-venv")
    python = layered_venv(root / ".venv")
    source = root / "apid-directory"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE_PIP},
    )
    assert done.returncode == 0, done.stderr
    return str(python)


def test_the_examples_own_tests_pass_against_the_installed_plugin(python):
    """docs/examples/apid-directory/tests, run as its author runs them (`pytest` in its folder),
    here against the installed wheel: they use apid.testing, so no daemon and no port."""
    ran = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        cwd=Path(python).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert re.search(r"\b7 passed\b", ran.stdout), ran.stdout


def sqlite_rows(deployment: Deployment, sql: str) -> list[tuple]:
    connection = sqlite3.connect(deployment.root / "var" / "test.db")
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


# --- apid migrate, apid migrate --status ---------------------------------------------------------


def test_migrate_creates_apids_schema_then_the_plugins_and_status_says_what_is_pending(python, tmp_path):
    deployment = Deployment(tmp_path)
    deployment.write()

    before = deployment.cli("migrate", "--status", python=python)
    assert before.returncode == 1, before.stderr
    apid_line, plugin_line = before.stdout.splitlines()
    head = re.fullmatch(r"apid: current revision none, head (\d+), pending 0001, .*\1", apid_line).group(1)
    assert plugin_line == "directory: current revision none, head 0001, pending 0001"
    assert "apid: migrations are pending; `apid migrate` applies them" in before.stderr

    done = deployment.cli("migrate", python=python)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"apid: created the database schema (revision {head})",
        "apid: created the schema of plugin directory (revision 0001)",
    ]
    assert sqlite_rows(deployment, "SELECT version_num FROM alembic_version_directory") == [("0001",)]
    tables = {name for (name,) in sqlite_rows(deployment, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"person", "directory_company", "directory_department"} <= tables

    after = deployment.cli("migrate", "--status", python=python)
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines() == [
        f"apid: current revision {head}, head {head}, up to date",
        "directory: current revision 0001, head 0001, up to date",
    ]
    again = deployment.cli("migrate", python=python)
    assert again.stdout.splitlines() == [
        f"apid: the database schema is up to date (revision {head})",
        "apid: the schema of plugin directory is up to date (revision 0001)",
    ]


def test_a_daemon_that_may_not_migrate_refuses_a_database_behind_its_plugins_until_migrated(python, tmp_path):
    # `migrate` of the checkout's venv, which knows no plugin with tables, migrates apid's schema only
    deployment = deployment_with_accounts(tmp_path, server={"database": {"migrate": False}}, accounts=(ADMIN_ACCOUNT,))

    refused = deployment.cli("serve", python=python)
    assert refused.returncode == 1
    assert "apid ready" not in refused.stdout
    assert "apid: cannot start: migrations are pending (directory: 0001); run `apid migrate` first" in refused.stderr
    assert "directory_company" not in {name for (name,) in sqlite_rows(deployment, "SELECT name FROM sqlite_master")}

    assert deployment.cli("migrate", python=python).returncode == 0
    daemon = Daemon(deployment, python=python).start()
    try:
        reply = daemon.request("GET", f"{V}/company/list", token=daemon.login(*ADMIN[:2]))
        assert (reply.status, reply.json) == (200, [])
    finally:
        daemon.stop()


# --- apid migrate --generate, --plan, --down, --to: the author's loop -------------------------------


def test_the_next_revision_is_generated_planned_applied_and_undone(python, tmp_path):
    """The author adds a column to store.py (a copy of the plugin's source, first on PYTHONPATH as
    an editable install would put it), generates the revision, reads the plan, migrates, and
    takes it back down and up again."""
    source = tmp_path / "src"
    shutil.copytree(EXAMPLE / "apid_directory", source / "apid_directory", ignore=shutil.ignore_patterns("__pycache__"))
    store = source / "apid_directory" / "store.py"
    declared = store.read_text()
    name_column = '    Column("name", String(200), nullable=False),\n'
    assert declared.count(name_column) == 2
    store.write_text(declared.replace(name_column, name_column + '    Column("website", String(200)),\n', 1))
    deployment = Deployment(tmp_path / "deployment")
    deployment.write()
    editable = {"PYTHONPATH": str(source)}

    def apid(*args: str) -> subprocess.CompletedProcess:
        return deployment.cli("migrate", *args, python=python, env=editable)

    def company_columns() -> list[str]:
        return [row[1] for row in sqlite_rows(deployment, "PRAGMA table_info(directory_company)")]

    assert apid().returncode == 0
    generated = apid("--generate", "directory", "-m", "a website for each company")
    assert generated.returncode == 0, generated.stderr
    written = source / "apid_directory" / "migrations" / "0002_a_website_for_each_company.py"
    assert generated.stdout.splitlines()[0] == f"apid: wrote {written}"
    assert "add_column" in written.read_text() and "down_revision = '0001'" in written.read_text()

    planned = apid("--plan")
    assert planned.returncode == 0, planned.stderr
    assert re.fullmatch(r"apid: at revision \d+, nothing to run", planned.stdout.splitlines()[0])
    assert planned.stdout.splitlines()[1:] == [
        "directory: from revision 0001 to 0002",
        "  upgrade 0002: a website for each company",
    ]
    with_sql = apid("--plan", "--sql")
    assert with_sql.returncode == 0, with_sql.stderr
    assert "ALTER TABLE directory_company ADD COLUMN website VARCHAR(200)" in with_sql.stdout
    assert "website" not in company_columns()  # a plan runs nothing
    done = apid()
    assert done.stdout.splitlines()[1] == "apid: upgraded the schema of plugin directory from revision 0001 to 0002"
    assert "website" in company_columns()

    assert apid("--down", "directory", "--plan").stdout.splitlines() == [
        "directory: from revision 0002 to 0001",
        "  downgrade 0002: a website for each company",
    ]
    down = apid("--down", "directory")
    assert down.stdout == "apid: downgraded the schema of plugin directory from revision 0002 to 0001\n", down.stderr
    assert "website" not in company_columns()
    up = apid("--to", "directory@head")
    assert up.stdout == "apid: upgraded the schema of plugin directory from revision 0001 to 0002\n", up.stderr
    assert "website" in company_columns()

    nothing = apid("--generate", "directory", "-m", "again")
    assert nothing.returncode == 1
    assert "match the database: nothing to generate" in nothing.stderr


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("--generate", "directory"), 2, "apid: --generate PLUGIN takes -m MESSAGE"),
        (("--sql",), 2, "apid: --sql goes with --plan"),
        (("--to", "nowhere@head"), 1, "apid: no schema named 'nowhere'; the schemas: apid, directory"),
        (("--to", "directory@0042"), 1, "apid: directory has no revision '0042'; its revisions: 0001"),
        (("--to", "directory"), 1, "apid: 'directory': name a schema and a revision, SCHEMA@REVISION"),
        (("--generate", "apid", "-m", "x"), 1, "apid: apid's own revisions are written by hand"),
    ],
)
def test_a_migrate_command_that_cannot_be_done_says_why(python, tmp_path, args, status, message):
    deployment = Deployment(tmp_path)
    deployment.write()
    done = deployment.cli("migrate", *args, python=python)
    assert done.returncode == status
    assert message in done.stderr, done.stderr


# --- the plugin's controllers over its tables -----------------------------------------------------


@pytest.fixture(scope="module")
def daemon_options(python) -> dict:
    """The module's daemon runs in the plugin's venv; it migrates the plugin's schema as it starts."""
    return {"python": python}


def create(daemon: Daemon, token: str, controller: str, fields: dict) -> dict:
    reply = daemon.request("POST", f"{V}/{controller}/create", fields, token=token)
    assert reply.status == 200, reply.body
    return reply.json


def test_departments_are_created_in_a_company_and_read_by_company(daemon, deployment, admin_token, user_token):
    admin_id = daemon.request("GET", f"{V}/person/list", token=admin_token).json[0]["id"]
    acme = create(daemon, admin_token, "company", {"name": "Acme"})
    assert acme == {"id": acme["id"], "name": "Acme", "createdBy": admin_id, "version": 0}
    other = create(daemon, admin_token, "company", {"name": "Globex"})
    research = create(daemon, admin_token, "department", {"companyId": acme["id"], "name": "Research"})
    assert research == {"id": research["id"], "companyId": acme["id"], "name": "Research", "version": 0}
    create(daemon, admin_token, "department", {"companyId": other["id"], "name": "Sales"})

    shown = daemon.request("GET", f"{V}/department/show/{research['id']}", token=user_token)
    assert (shown.status, shown.json) == (200, research)
    listed = daemon.request("GET", f"{V}/department/list?companyId={acme['id']}", token=user_token)
    assert (listed.status, listed.json) == (200, [research])
    company = daemon.request("GET", f"{V}/company/show/{acme['id']}", token=user_token)
    assert company.json == {"id": acme["id"], "name": "Acme", "version": 0}  # createdBy: administrators only
    assert sqlite_rows(
        deployment, f"SELECT company_id, name FROM directory_department WHERE id = {research['id']}"
    ) == [(acme["id"], "Research")]


def test_a_name_taken_or_a_stale_version_is_a_conflict_a_missing_id_not_found(daemon, admin_token, user_token):
    initech = create(daemon, admin_token, "company", {"name": "Initech"})
    taken = daemon.request("POST", f"{V}/company/create", {"name": "Initech"}, token=admin_token)
    assert (taken.status, taken.json["detail"]) == (409, "a company named 'Initech' exists already")

    renamed = daemon.request(
        "PUT", f"{V}/company/update/{initech['id']}", {"name": "Initrode", "version": 0}, token=admin_token
    )
    assert (renamed.status, renamed.json["name"], renamed.json["version"]) == (200, "Initrode", 1)
    stale = daemon.request(
        "PUT", f"{V}/company/update/{initech['id']}", {"name": "Initech 2", "version": 0}, token=admin_token
    )
    assert (stale.status, stale.json["currentVersion"]) == (409, 1)
    assert daemon.request("GET", f"{V}/company/show/{initech['id']}", token=user_token).json["name"] == "Initrode"

    missing = daemon.request("GET", f"{V}/department/show/999999", token=user_token)
    assert (missing.status, missing.json["detail"]) == (404, "no department with id 999999")
    nowhere = daemon.request("POST", f"{V}/department/create", {"companyId": 999999, "name": "Lost"}, token=admin_token)
    assert (nowhere.status, nowhere.json["errors"]) == (
        400,
        [{"field": "companyId", "reason": "is not the id of a company"}],
    )
    assert daemon.request("POST", f"{V}/company/create", {"name": "Mine"}, token=user_token).status == 403


def test_deleting_the_person_who_created_a_company_keeps_the_company(daemon, admin_token):
    founder = new_person(daemon, admin_token, roles=["ROLE_ADMIN"])
    company = create(daemon, daemon.login(founder["username"], founder["password"]), "company", {"name": "Hooli"})
    assert company["createdBy"] == founder["id"]

    assert daemon.request("DELETE", f"{V}/person/delete/{founder['id']}", token=admin_token).status == 200
    kept = daemon.request("GET", f"{V}/company/show/{company['id']}", token=admin_token)
    assert (kept.status, kept.json) == (200, {**company, "createdBy": None})


def test_deleting_a_company_deletes_its_departments(daemon, admin_token):
    company = create(daemon, admin_token, "company", {"name": "Vandelay"})
    department = create(daemon, admin_token, "department", {"companyId": company["id"], "name": "Imports"})
    deleted = daemon.request("DELETE", f"{V}/company/delete/{company['id']}", token=admin_token)
    assert (deleted.status, deleted.json) == (200, {"id": company["id"], "name": "Vandelay"})
    assert daemon.request("GET", f"{V}/department/show/{department['id']}", token=admin_token).status == 404


# --- PostgreSQL: daemons and migrate commands started together --------------------------------------

LOGGED_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade():
    op.create_table("migration_log", sa.Column("ran_at", sa.DateTime(timezone=True), server_default=sa.func.now()))
    op.execute("SELECT pg_sleep(2)")  # the other process arrives meanwhile, and must wait
    op.execute("INSERT INTO migration_log DEFAULT VALUES")
"""


def logged_plugin(folder: Path) -> Path:
    """A test-only plugin whose one slow revision logs each time it runs, found through its entry
    point like an installed one: a .dist-info folder beside its package, for PYTHONPATH."""
    package = folder / "apid_logged_migrations"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "0001_log.py").write_text(LOGGED_REVISION)
    info = folder / "apid_logged-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apid-logged\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[apid.migrations]\nlogged = apid_logged_migrations\n")
    return folder


@pytest.mark.postgresql
def test_two_migrate_commands_started_together_on_postgresql_migrate_once(python, tmp_path, postgres):
    url = postgres.new_database("plugin_migrations")
    deployment = Deployment(tmp_path)
    deployment.write()
    env = {**os.environ, "APID_DATABASE_URL": url, "PYTHONPATH": str(logged_plugin(tmp_path / "site"))}
    command = [python, "-m", "apid", "migrate", "--config-dir", str(deployment.config_dir), "--env", "test"]
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs

    # One took the lock and migrated all three schemas; the other waited, then found them up to date.
    first, second = sorted((stdout.splitlines() for stdout, _ in outputs), key=lambda lines: "created" not in lines[0])
    assert [line.split(" (revision")[0] for line in first] == [
        "apid: created the database schema",
        "apid: created the schema of plugin directory",
        "apid: created the schema of plugin logged",
    ]
    assert [line.split(" (revision")[0] for line in second] == [
        "apid: the database schema is up to date",
        "apid: the schema of plugin directory is up to date",
        "apid: the schema of plugin logged is up to date",
    ]
    engine = create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM migration_log")).scalar() == 1
        assert connection.execute(text("SELECT version_num FROM alembic_version_directory")).all() == [("0001",)]
        assert connection.execute(text("SELECT version_num FROM alembic_version_logged")).all() == [("0001",)]
    engine.dispose()
