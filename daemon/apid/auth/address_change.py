"""An owner's change of their own e-mail address, and the two links that follow it.

The address is where a password reset goes, so whoever changes it can take the account:
`Accounts.update` makes an owner prove a change of theirs with `currentPassword`. The old
address is then told, with a link that puts it back, ends every session and leads to the
reset page: an owner whose password was stolen too gets the account back from their mailbox.
With `accounts.confirmEmailChange` the new address must first confirm by a link of its own,
so a mistyped or somebody else's address never gets the account's mail.

Each link is a one-time id (`apid.auth.onetime`) carrying the address it sets, opened
through `/validate` like every emailed link; the ids are issued in the transaction of the
change they belong to, and their mail is written in it too (`apid.mail.outbox`), sent once it
commits. The links are opened by GET and carried out by POST (`apid.auth.link_page`), so a
mail scanner opening them changes nothing; the owner may cancel the pending revert links
(`cancel_reverts`, `person/cancelReverts`). A later change never withdraws an earlier revert
link, and using a revert link withdraws only the ones issued after it: someone holding the
password who changes the address twice, then reverts to their own first address, cannot take
away the way back of the address the account had before them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, func, select
from twisted.internet.defer import Deferred

from apid.auth import onetime
from apid.auth.accounts import Account, change_account, email_key, taken
from apid.auth.sessions import Revocations, revoke_person
from apid.config.server import AccountsConfig
from apid.hooks.events import AccountEvents
from apid.mail.message import PRODUCT, Message
from apid.mail.outbox import queue_mail
from apid.problems import BadRequest
from apid.store.database import Database
from apid.store.tables import account_token, person

PURPOSES = (onetime.EMAIL_CONFIRM, onetime.EMAIL_REVERT)


def address_of(connection: Connection, person_id: int) -> str | None:
    return connection.execute(select(person.c.email).where(person.c.id == person_id)).scalar()


def revert_id(connection: Connection, person_id: int, lifetime: int, old: str) -> str:
    """An id that puts `old` back; the earlier ones stay good (see the module's docstring)."""
    return onetime.issue(connection, person_id, onetime.EMAIL_REVERT, lifetime, address=old, replaces=False)


@dataclass(frozen=True)
class Reverted:
    """An address put back: the account's sessions are over, and a reset id lets its owner
    choose a new password."""

    person_id: int
    reset_secret: str


def confirm_address(
    connection: Connection, secret: str, revert_lifetime: int, events: AccountEvents | None
) -> tuple[Account, str, str] | None:
    """Use a confirmation id: the account gets the address the id carries (409 if another
    account took it meanwhile). The account, its old address, and the id that reverts it."""
    live = onetime.consume(connection, secret, onetime.EMAIL_CONFIRM)
    if live is None or live.address is None:
        return None
    old = address_of(connection, live.person_id)
    if old is None:
        return None
    taken(connection, None, live.address, live.person_id)
    account = change_account(connection, live.person_id, events, email=live.address, email_key=email_key(live.address))
    return account, old, revert_id(connection, live.person_id, revert_lifetime, old)


def cancel_reverts(connection: Connection, person_id: int) -> int:
    """The owner's pending revert links stop working (they confirmed the change is theirs); how
    many were pending."""
    pending = connection.execute(
        select(func.count())
        .select_from(account_token)
        .where(
            account_token.c.person_id == person_id,
            account_token.c.purpose == onetime.EMAIL_REVERT,
            account_token.c.used_at.is_(None),
            account_token.c.expires_at > onetime.now(),
        )
    ).scalar_one()
    onetime.withdraw(connection, person_id, onetime.EMAIL_REVERT)
    return int(pending)


def revert_address(
    connection: Connection, secret: str, reset_lifetime: int, events: AccountEvents | None
) -> Reverted | None:
    """Use a revert id: the old address comes back (unless another account holds it by now),
    every session of the account ends, and a reset id is issued for the owner's next step."""
    live = onetime.consume(connection, secret, onetime.EMAIL_REVERT)
    if live is None or live.address is None:
        return None
    holders = connection.execute(
        select(person.c.id).where(person.c.email_key == email_key(live.address), person.c.id != live.person_id)
    ).first()
    if holders is None:
        change_account(connection, live.person_id, events, email=live.address, email_key=email_key(live.address))
    # The changes after this one are undone with it: their revert links and pending confirmations
    onetime.withdraw(connection, live.person_id, onetime.EMAIL_REVERT, issued_after=live.row_id)
    onetime.withdraw(connection, live.person_id, onetime.EMAIL_CONFIRM)
    revoke_person(connection, live.person_id)
    return Reverted(live.person_id, onetime.issue(connection, live.person_id, onetime.RESET, reset_lifetime))


class AddressChanges:
    """Issues, mails and follows the links of an owner's address change."""

    def __init__(
        self,
        *,
        db: Database,
        revocations: Revocations,
        config: AccountsConfig,
        base_url: str,
        home_url: str,
        events: AccountEvents | None = None,
    ) -> None:
        self._db = db
        self._revocations = revocations
        self._config = config
        self._base_url = base_url
        self._home_url = home_url
        self._events = events  # None when webhookActive is false

    @property
    def confirmed_first(self) -> bool:
        """Whether a new address takes effect only once it confirms (`accounts.confirmEmailChange`)."""
        return self._config.confirm_email_change

    def issue(self, connection: Connection, account: Account, old: str, new: str) -> None:
        """In the transaction of the owner's change: the id the change needs, and its mail. With
        confirmation first, the new address is checked free now (a 409 at once, not at the link)."""
        if self.confirmed_first:
            taken(connection, None, new, account.id)
            secret = onetime.issue(
                connection, account.id, onetime.EMAIL_CONFIRM, self._config.validation_lifetime, address=new
            )
            queue_mail(connection, self._confirmation(account.username, new, secret))
            return
        secret = revert_id(connection, account.id, self._config.revert_lifetime, old)
        queue_mail(connection, self._notice(account.username, old, new, secret))

    def cancel_reverts(self, person_id: int) -> Deferred[int]:
        """End the owner's pending revert links (`cancel_reverts`); how many there were."""
        return self._db.write(cancel_reverts, person_id)

    async def follow(self, secret: str, purpose: str) -> str:
        """Carry out the link of an id of `purpose` (one of PURPOSES); where to send the browser."""
        if purpose == onetime.EMAIL_CONFIRM:
            account = await self._db.write(self._confirm, secret)
            if account is None:
                raise BadRequest(onetime.BAD_LINK)
            await self._revocations.account_changed(account.id)
            return self._home_url
        reverted = await self._db.write(revert_address, secret, self._config.reset_lifetime, self._events)
        if reverted is None:
            raise BadRequest(onetime.BAD_LINK)
        await self._revocations.account_changed(reverted.person_id, sessions_ended=True)
        return onetime.page(self._config.reset_url, reverted.reset_secret)

    def _confirm(self, connection: Connection, secret: str) -> Account | None:
        """Use a confirmation id, and tell the old address in the same transaction."""
        confirmed = confirm_address(connection, secret, self._config.revert_lifetime, self._events)
        if confirmed is None:
            return None
        account, old, revert = confirmed
        queue_mail(connection, self._notice(account.username, old, account.email, revert))
        return account

    def _confirmation(self, username: str, new: str, secret: str) -> Message:
        return Message(
            new,
            f"{PRODUCT}: confirm your new e-mail address",
            (
                f"Hello {username},\n\nto make this the e-mail address of your {PRODUCT} account, open this link "
                f"within {onetime.duration(self._config.validation_lifetime)}:\n\n"
                f"{onetime.link(self._base_url, secret)}\n\n"
                "If you did not ask for this, ignore this message: nothing changes.\n"
            ),
        )

    def _notice(self, username: str, old: str, new: str, secret: str) -> Message:
        return Message(
            old,
            f"{PRODUCT}: the e-mail address of your account was changed",
            (
                f"Hello {username},\n\nthe e-mail address of your {PRODUCT} account was changed from this "
                f"address to {new}.\n\nIf you did not do this, open this link within "
                f"{onetime.duration(self._config.revert_lifetime)}: it puts this address back, signs the account out "
                f"everywhere and lets you choose a new password:\n\n{onetime.link(self._base_url, secret)}\n\n"
                "If it was you, ignore this message.\n"
            ),
        )
