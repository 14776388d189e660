"""The durable mail outbox (issue 33 item 4) against a real SQLite file: mail is written in the
transaction of its change (and vanishes with a rollback), leased to one daemon at a time,
sent at once when its transaction commits, tried again after each delay, dropped when no
server can take it, and handed back by a stopping daemon."""

from __future__ import annotations

import time

import pytest
import pytest_twisted
from sqlalchemy import select, update
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.logger import LogLevel, globalLogPublisher

from apid.mail.message import Message, Undeliverable
from apid.mail.outbox import PENDING, MailSender, claim, postpone, queue_mail, release
from apid.store.database import run_read, run_write
from apid.store.tables import mail_outbox

LINK = "http://127.0.0.1:8080/validate?id=" + "Ab-_" * 11
LONG = 600.0  # a poll that never comes during a test: what is sent was woken for


def welcome(to: str = "bob@example.com") -> Message:
    return Message(to, "apid: confirm your account", f"Hello bob,\n\nopen this link:\n\n{LINK}\n")


def rows(engine) -> list:
    return run_read(engine, lambda c: c.execute(select(mail_outbox).order_by(mail_outbox.c.id)).all())


def queue(engine, *messages: Message) -> None:
    run_write(engine, lambda c: [queue_mail(c, m) for m in messages])


class FlakyMailer:
    """Fails its first `failures` sends with a failed Deferred, then succeeds."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.attempts: list[tuple[float, Message]] = []
        self.delivered: list[Message] = []

    def send(self, message: Message) -> defer.Deferred[None]:
        self.attempts.append((time.monotonic(), message))
        if len(self.attempts) <= self.failures:
            return defer.fail(ConnectionRefusedError("SMTP server down"))
        self.delivered.append(message)
        return defer.succeed(None)


class UndeliverableMailer:
    def __init__(self) -> None:
        self.attempts = 0

    def send(self, message: Message) -> defer.Deferred[None]:
        self.attempts += 1
        return defer.fail(Undeliverable("the server does not offer SMTPUTF8"))


class SlowMailer:
    """Answers only when the test says so."""

    def __init__(self) -> None:
        self.waiting: list[defer.Deferred[None]] = []

    def send(self, message: Message) -> defer.Deferred[None]:
        self.waiting.append(defer.Deferred())
        return self.waiting[-1]


@pytest.fixture
def events():
    caught: list[dict] = []
    globalLogPublisher.addObserver(caught.append)
    yield caught
    globalLogPublisher.removeObserver(caught.append)


def mail_events(events: list[dict], level: LogLevel) -> list[dict]:
    return [e for e in events if e.get("log_namespace") == "apid.mail" and e.get("log_level") == level]


async def until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await deferLater(reactor, 0.01, lambda: None)


@pytest.fixture
def senders(database):
    """Senders made by the test on the `database`, stopped after it."""
    made: list[MailSender] = []

    def make(mailer, **options) -> MailSender:
        options.setdefault("poll", LONG)
        sender = MailSender(reactor=reactor, db=database, mailer=mailer, **options)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        pytest_twisted.blockon(defer.ensureDeferred(sender.stop(reactor.seconds())))


# --- the table ------------------------------------------------------------------------------------


def test_queued_mail_is_written_in_the_callers_transaction(engine):
    queue(engine, welcome())
    (row,) = rows(engine)
    assert (row.recipient, row.subject, row.body) == ("bob@example.com", welcome().subject, welcome().body)
    assert (row.state, row.tries, row.lease_owner) == (PENDING, 0, None)
    assert row.next_attempt_at == row.created_at


def test_mail_of_a_change_rolled_back_is_never_written(engine):
    def change_then_fail(connection):
        queue_mail(connection, welcome("x@example.com"))
        raise RuntimeError("the change fails after its mail was queued")

    with pytest.raises(RuntimeError):
        run_write(engine, change_then_fail)
    assert rows(engine) == []


def test_a_claim_leases_each_message_to_one_daemon_until_the_lease_runs_out(engine):
    queue(engine, welcome("a@example.com"), welcome("b@example.com"))
    now = time.time()
    first = run_write(engine, claim, "one", now, 30.0, 10)
    assert [q.message.to for q in first] == ["a@example.com", "b@example.com"]
    assert run_write(engine, claim, "two", now + 1, 30.0, 10) == []
    assert {(r.lease_owner, r.lease_until) for r in rows(engine)} == {("one", now + 30.0)}
    taken_over = run_write(engine, claim, "two", now + 31, 30.0, 1)  # "one" died holding them
    assert [q.message.to for q in taken_over] == ["a@example.com"]


def test_a_postponed_message_counts_a_try_and_waits_for_its_time(engine):
    queue(engine, welcome())
    now = time.time()
    (queued,) = run_write(engine, claim, "one", now, 30.0, 10)
    run_write(engine, postpone, "other", queued.id, now + 10)  # not its lease: changes nothing
    assert rows(engine)[0].lease_owner == "one"
    run_write(engine, postpone, "one", queued.id, now + 10)
    (row,) = rows(engine)
    assert (row.tries, row.next_attempt_at, row.lease_owner, row.lease_until) == (1, now + 10, None, None)
    assert run_write(engine, claim, "two", now + 9, 30.0, 10) == []
    (again,) = run_write(engine, claim, "two", now + 10, 30.0, 10)
    assert again.tries == 1


def test_release_hands_back_only_the_callers_leases(engine):
    queue(engine, welcome("a@example.com"), welcome("b@example.com"))
    now = time.time()
    (a,) = run_write(engine, claim, "one", now, 30.0, 1)
    (b,) = run_write(engine, claim, "two", now, 30.0, 1)
    run_write(engine, release, "one", [a.id, b.id])
    assert [r.lease_owner for r in rows(engine)] == [None, "two"]


# --- the sender -----------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_mail_is_sent_as_soon_as_its_transaction_commits_and_then_forgotten(engine, database, senders):
    mailer = FlakyMailer()
    senders(mailer).start()
    await until(lambda: True)  # its first look, at start, found nothing
    await database.write(lambda c: queue_mail(c, welcome()))  # no poll comes: the commit wakes it
    await until(lambda: mailer.delivered)
    assert mailer.delivered == [welcome()]
    await until(lambda: rows(engine) == [])


@pytest_twisted.ensureDeferred
async def test_mail_waiting_at_start_is_sent(engine, senders):
    queue(engine, welcome("a@example.com"), welcome("b@example.com"))
    mailer = FlakyMailer()
    senders(mailer).start()
    await until(lambda: len(mailer.delivered) == 2)
    assert sorted(m.to for m in mailer.delivered) == ["a@example.com", "b@example.com"]


@pytest_twisted.ensureDeferred
async def test_mail_of_another_daemon_is_sent_at_a_poll_once_its_lease_ran_out(engine, senders):
    queue(engine, welcome())
    run_write(engine, claim, "dead-daemon", time.time(), 0.3, 10)
    mailer = FlakyMailer()
    senders(mailer, poll=0.1).start()
    await deferLater(reactor, 0.15, lambda: None)
    assert mailer.attempts == []  # still leased
    await until(lambda: mailer.delivered)
    await until(lambda: rows(engine) == [])


@pytest_twisted.ensureDeferred
async def test_a_failing_send_is_tried_again_after_each_delay(engine, senders, events):
    queue(engine, welcome())
    mailer = FlakyMailer(failures=2)
    senders(mailer, delays=(0.2, 0.4, 10.0)).start()
    await until(lambda: mailer.delivered)
    (first, _), (second, _), (third, _) = mailer.attempts
    assert second - first >= 0.2 and third - second >= 0.4
    await until(lambda: rows(engine) == [])
    warnings = mail_events(events, LogLevel.warn)
    assert [e["attempt"] for e in warnings] == [1, 2]
    assert all("SMTP server down" in e["error"] for e in warnings)
    assert mail_events(events, LogLevel.error) == []


@pytest_twisted.ensureDeferred
async def test_it_gives_up_after_the_last_delay_and_logs(engine, senders, events):
    queue(engine, welcome())
    mailer = FlakyMailer(failures=100)
    senders(mailer, delays=(0.05, 0.05)).start()
    await until(lambda: rows(engine) == [])
    await deferLater(reactor, 0.2, lambda: None)
    assert len(mailer.attempts) == 3
    assert len(mail_events(events, LogLevel.warn)) == 3
    (given_up,) = mail_events(events, LogLevel.error)
    assert (given_up["attempt"], given_up["subject"], given_up["to"]) == (3, welcome().subject, "bob@example.com")


@pytest_twisted.ensureDeferred
async def test_an_undeliverable_message_is_logged_once_as_an_error_and_not_tried_again(engine, senders, events):
    queue(engine, welcome("jörg@example.com"))
    mailer = UndeliverableMailer()
    senders(mailer, delays=(0.05, 0.05)).start()
    await until(lambda: rows(engine) == [])
    await deferLater(reactor, 0.2, lambda: None)
    assert mailer.attempts == 1
    assert mail_events(events, LogLevel.warn) == []
    (dropped,) = mail_events(events, LogLevel.error)
    assert (dropped["to"], dropped["subject"]) == ("jörg@example.com", welcome().subject)
    assert dropped["error"] == "the server does not offer SMTPUTF8"


@pytest_twisted.ensureDeferred
async def test_two_daemons_send_each_message_once(engine, database, senders):
    mailer = FlakyMailer()
    one, two = senders(mailer, poll=0.05), senders(mailer, poll=0.05)
    one.start()
    two.start()
    recipients = [f"user{n}@example.com" for n in range(40)]
    for to in recipients:
        await database.write(lambda c, to=to: queue_mail(c, welcome(to)))
    await until(lambda: rows(engine) == [])
    assert sorted(m.to for m in mailer.delivered) == sorted(recipients)


@pytest_twisted.ensureDeferred
async def test_a_stopping_daemon_hands_back_what_it_could_not_send(engine, database):
    queue(engine, welcome())
    mailer = SlowMailer()
    sender = MailSender(reactor=reactor, db=database, mailer=mailer, poll=LONG)
    sender.start()
    await until(lambda: mailer.waiting)
    assert rows(engine)[0].lease_owner == sender.owner
    await sender.stop(reactor.seconds() + 0.1)
    (row,) = rows(engine)
    assert (row.lease_owner, row.lease_until, row.tries) == (None, None, 0)
    await database.write(lambda c: queue_mail(c, welcome("late@example.com")))
    await deferLater(reactor, 0.1, lambda: None)
    assert len(mailer.waiting) == 1  # stopped: claims nothing more, the mail waits in the table
    assert len(rows(engine)) == 2


@pytest_twisted.ensureDeferred
async def test_mail_is_due_by_wall_clock_time_whoever_wrote_it(engine, senders):
    """A retry another daemon recorded is not sent before its time by this one."""
    queue(engine, welcome())
    run_write(engine, lambda c: c.execute(update(mail_outbox).values(next_attempt_at=time.time() + 0.3, tries=1)))
    mailer = FlakyMailer()
    senders(mailer, poll=0.05).start()
    await deferLater(reactor, 0.15, lambda: None)
    assert mailer.attempts == []
    await until(lambda: mailer.delivered)


@pytest.mark.postgresql
def test_on_postgresql_daemons_claiming_at_once_never_take_the_same_message(postgres, tmp_path):
    """SKIP LOCKED: a second claim while the first is not yet committed passes its rows over."""
    from apid.store.database import make_engine
    from apid.store.migrate import upgrade

    engine = make_engine(postgres.new_database(f"mail_{tmp_path.name.lower()}"))
    try:
        upgrade(engine)
        queue(engine, welcome("a@example.com"), welcome("b@example.com"), welcome("c@example.com"))
        now = time.time()
        with engine.connect() as first, engine.connect() as second, first.begin():
            mine = claim(first, "one", now, 30.0, 2)
            with second.begin():
                theirs = claim(second, "two", now, 30.0, 10)
        assert [q.message.to for q in mine] == ["a@example.com", "b@example.com"]
        assert [q.message.to for q in theirs] == ["c@example.com"]
        assert {r.lease_owner for r in rows(engine)} == {"one", "two"}
    finally:
        engine.dispose()
