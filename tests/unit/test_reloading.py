"""Reload everywhere (issue 15, item 3): the deployment's IO State generation, each process's
report, and the watcher that reloads when the generation moves. Against a real SQLite file
migrated with Alembic and the installed plugins bound to a copy of the repository's files."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_twisted
from sqlalchemy import update
from twisted.internet import reactor
from twisted.internet.defer import ensureDeferred
from twisted.internet.task import deferLater

from apid.config.files import load_api
from apid.iostate import IOStateError
from apid.plugin_host.discovery import load_all
from apid.plugin_host.rules import RuleBook
from apid.server.reloading import (
    OK,
    Report,
    RulesWatcher,
    announce,
    announce_reload,
    bump_generation,
    forget,
    live_processes,
    read_generation,
    report,
    reports_since,
)
from apid.store.database import run_read, run_write
from apid.store.tables import iostate_report

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security


def at(minutes_ago: float = 0) -> datetime:
    return datetime.now(UTC) - timedelta(minutes=minutes_ago)


def seen(engine, who: str, moment: datetime) -> None:
    run_write(
        engine,
        lambda connection: connection.execute(
            update(iostate_report).where(iostate_report.c.who == who).values(seen_at=moment)
        ),
    )


# --- the generation and the reports ----------------------------------------------------------------


def test_the_generation_starts_at_0_and_each_bump_moves_it_by_one(engine):
    assert run_read(engine, read_generation) == 0
    assert [run_write(engine, bump_generation) for _ in range(3)] == [1, 2, 3]
    assert run_read(engine, read_generation) == 3


def test_a_report_is_kept_per_process_and_replaced_by_its_next(engine):
    run_write(engine, report, Report("a:1", 1, OK, at()))
    run_write(engine, report, Report("b:2", 1, OK, at()))
    run_write(engine, report, Report("a:1", 2, "person.json: broken", at()))
    assert [(r.who, r.generation, r.outcome) for r in run_read(engine, reports_since, 1)] == [
        ("a:1", 2, "person.json: broken"),
        ("b:2", 1, OK),
    ]
    assert [r.who for r in run_read(engine, reports_since, 2)] == ["a:1"]


def test_a_reload_waits_for_the_processes_seen_lately_only(engine):
    for who in ("live:1", "quiet:2"):
        run_write(engine, report, Report(who, 0, OK, at()))
    seen(engine, "quiet:2", at(minutes_ago=10))  # killed: no heartbeat since
    generation, expected = run_write(engine, announce)
    assert (generation, expected) == (1, {"live:1"})


def test_a_stopped_process_is_forgotten_and_one_gone_a_day_is_purged(engine):
    for who in ("stopped:1", "crashed:2", "running:3"):
        run_write(engine, report, Report(who, 0, OK, at()))
    run_write(engine, forget, "stopped:1")
    seen(engine, "crashed:2", at(minutes_ago=25 * 60))
    assert {r.who for r in run_read(engine, reports_since, 0)} == {"crashed:2", "running:3"}
    run_write(engine, report, Report("running:3", 1, OK, at()))  # any report purges
    assert {r.who for r in run_read(engine, reports_since, 0)} == {"running:3"}
    assert run_read(engine, live_processes) == {"running:3"}


# --- the watcher ------------------------------------------------------------------------------------


@pytest.fixture
def iostate(tmp_path) -> Path:
    folder = tmp_path / "iostate"
    shutil.copytree(ROOT / "iostate", folder)
    return folder


@pytest.fixture
def rule_book(iostate) -> RuleBook:
    return RuleBook(load_all(iostate, SECURITY), iostate, SECURITY)


def show_roles(rule_book: RuleBook) -> frozenset[str]:
    return rule_book.current.controller("person").versions["1"].endpoints["show"].roles


def edit_show_roles(iostate: Path, roles: list[str]) -> None:
    path = iostate / "person.json"
    document = json.loads(path.read_text())
    document["IOSTATE"]["VERSION"]["1"]["URI"]["show"]["ROLES"].update(DEFAULT=roles, BATCH=roles)
    path.write_text(json.dumps(document))


@pytest.fixture
def watcher(database, rule_book):
    watcher = RulesWatcher(reactor=reactor, db=database, rule_book=rule_book, who="here:1")
    yield watcher
    pytest_twisted.blockon(ensureDeferred(watcher.stop()))


@pytest_twisted.ensureDeferred
async def test_the_watcher_reports_at_start_and_reloads_only_when_the_generation_moves(
    engine, iostate, rule_book, watcher
):
    await watcher.start(0)
    assert [(r.who, r.generation, r.outcome) for r in run_read(engine, reports_since, 0)] == [("here:1", 0, OK)]
    in_force = rule_book.current
    await watcher.catch_up()
    assert rule_book.current is in_force  # nothing moved: nothing re-read

    edit_show_roles(iostate, ["ROLE_ADMIN"])
    run_write(engine, bump_generation)
    await watcher.catch_up()
    assert show_roles(rule_book) == {"ROLE_ADMIN"}
    assert [(r.generation, r.outcome) for r in run_read(engine, reports_since, 1)] == [(1, OK)]


@pytest_twisted.ensureDeferred
async def test_a_broken_file_keeps_the_rules_in_force_and_is_reported(engine, iostate, rule_book, watcher):
    await watcher.start(0)
    edit_show_roles(iostate, ["ROLE_NOBODY"])  # not a role of the network group
    run_write(engine, bump_generation)
    await watcher.catch_up()
    assert show_roles(rule_book) == {"ROLE_ADMIN", "ROLE_USER"}
    (done,) = run_read(engine, reports_since, 1)
    assert done.outcome != OK and "person.json" in done.outcome


@pytest_twisted.ensureDeferred
async def test_the_watcher_polls_the_generation_on_its_own(engine, iostate, rule_book, watcher):
    await watcher.start(0)
    edit_show_roles(iostate, ["ROLE_ADMIN"])
    run_write(engine, bump_generation)
    for _ in range(30):  # polled every half second: within a second
        await deferLater(reactor, 0.05, lambda: None)
        if show_roles(rule_book) == {"ROLE_ADMIN"}:
            break
    assert show_roles(rule_book) == {"ROLE_ADMIN"}


@pytest_twisted.ensureDeferred
async def test_a_process_stopping_removes_its_report(engine, watcher):
    await watcher.start(0)
    await watcher.stop()
    assert run_read(engine, reports_since, 0) == []


# --- announcing ------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_announcing_moves_the_generation_only_when_the_files_load(engine, database, iostate, rule_book):
    edit_show_roles(iostate, ["ROLE_NOBODY"])
    with pytest.raises(IOStateError, match=re.escape("person.json")):
        await announce_reload(reactor, database, rule_book)
    assert run_read(engine, read_generation) == 0
    edit_show_roles(iostate, ["ROLE_ADMIN"])
    assert await announce_reload(reactor, database, rule_book) == 1
    assert show_roles(rule_book) == {"ROLE_ADMIN", "ROLE_USER"}  # announcing swaps nothing: the watcher does
