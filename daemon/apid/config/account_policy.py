"""The account policy: what a new username and password must be. Registration, `person/create`
and `apid user add` apply it, and plugins through `apid.plugin.check_credentials` (an action's
`validate=`), so it is pure and below them all. Fixed in code today: a deployment that needs
longer passwords changes `PASSWORD_LENGTH` (docs/security.md).
"""

from __future__ import annotations

import re

from apid.problems import InvalidFields

USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{2,63}")
PASSWORD_LENGTH = (8, 128)


def check_credentials(username: str | None, password: str | None) -> None:
    """The account policy for a new username or password; one 400 lists every breach."""
    errors = []
    if username is not None and not USERNAME.fullmatch(username):
        errors.append(
            {
                "field": "username",
                "reason": "must be 3 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            }
        )
    if password is not None:
        low, high = PASSWORD_LENGTH
        if not low <= len(password) <= high:
            errors.append({"field": "password", "reason": f"must be {low} to {high} characters long"})
        elif username is not None and password.casefold() == username.casefold():
            errors.append({"field": "password", "reason": "must not be the username"})
    if errors:
        raise InvalidFields(errors=errors)
