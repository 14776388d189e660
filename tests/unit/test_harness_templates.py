"""The harness's template databases (tests/harness.py, `Deployment.add_accounts`): deployments
alike but for what only the running daemon reads share one database, others do not, and a
copy holds what `apid migrate` and `apid user add` make."""

from __future__ import annotations

import sqlite3

from harness import ADMIN_ACCOUNT, USER_ACCOUNT, Deployment, deployment_with_accounts

ACCOUNTS = (ADMIN_ACCOUNT, USER_ACCOUNT)


def key(root, **settings) -> str:
    deployment = Deployment(root, **settings)
    deployment.write()
    return deployment._template_key(ACCOUNTS)


def test_runtime_settings_share_a_template_and_the_others_do_not(tmp_path):
    plain = key(tmp_path / "plain")
    assert key(tmp_path / "asyncio", server={"reactor": "asyncio", "apiThrottle": True}) == plain
    assert key(tmp_path / "workers", api={"procCores": 2, "batchLimit": 5}) == plain
    assert key(tmp_path / "plugins", server={"loadPlugins": ["apid-sample"]}) != plain
    assert key(tmp_path / "hooks", server={"webhookActive": True}) != plain
    assert key(tmp_path / "roles", api={"security": {"superuserRole": "ROLE_USER"}}) != plain
    assert Deployment(tmp_path / "plain")._template_key((ADMIN_ACCOUNT,)) != plain


def people(deployment: Deployment) -> list[tuple]:
    with sqlite3.connect(deployment.root / "var" / "test.db") as database:
        return database.execute(
            "select p.username, p.email, r.authority from person p join person_role pr on pr.person_id = p.id "
            "join role r on r.id = pr.role_id order by p.id"
        ).fetchall()


def test_a_copy_holds_the_accounts_the_commands_made(tmp_path):
    made = deployment_with_accounts(tmp_path / "made", server={"reactor": "asyncio"})
    copied = deployment_with_accounts(tmp_path / "copied")
    assert copied.migrated
    assert (
        people(copied)
        == people(made)
        == [
            ("admin", "admin@example.com", "ROLE_ADMIN"),
            ("alice", "alice@example.com", "ROLE_USER"),
        ]
    )
    assert copied.cli("migrate").returncode == 0  # at the head already: nothing to do
