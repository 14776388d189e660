"""The fields a controller declares its code stores and answers, and how strictly its IO State is
held to them.

The declaration is a keyword of the class statement (`class Team(Controller, stores=(team,
"led")):`: a Table's column keys and field names), so that no attribute a plugin names for
itself means anything to apid: 0.1's plugins had `table` (a SQLAlchemy Table) and `fields` (API
name to column) of their own, and a release that read them refused those plugins' rules and so
the whole daemon. An action declared with `page=` reads `offset` and `max` through
`call.page()`: they count as declared without being listed.

A controller declared with `stores=` has its rules refused when they name another field. The
spelling of the release before it, `fields` as a set of names, is still read where it cannot
be a plugin's own (a set or frozenset of strings, never a mapping), and its rules that name
another field are only warned about until 0.3 (docs/compatibility.md); an undeclared controller
is not checked.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Table
from twisted.logger import Logger

from apid.declarations.actions import action_rules
from apid.iostate import ControllerState, IOStateError, check_fields
from apid.plugin import Controller

log = Logger(namespace="apid.plugins")

PAGING = frozenset({"offset", "max"})  # what `call.page()` reads (apid.plugin.Page)


@dataclass(frozen=True)
class Declared:
    fields: frozenset[str]
    strict: bool  # by `stores=`: rules naming another field are refused, not only warned about


class DeclarationError(TypeError):
    """`stores=` holds something that is neither a Table nor a field name."""


def declared_fields(cls: type[Controller]) -> Declared | None:
    """What `cls` declares its code stores and answers; None when it declares nothing."""
    stores = cls.__apid_stores__
    if stores is not None:
        declared, strict = _stored(stores, cls), True
    else:
        old = getattr(cls, "fields", None)
        if not (isinstance(old, (set, frozenset)) and all(isinstance(name, str) for name in old)):
            return None
        declared, strict = frozenset(old), False
    if any(action_rules(handler).page is not None for handler in cls.actions().values()):
        declared |= PAGING
    return Declared(declared, strict)


def warn_of_the_old_spelling(cls: type[Controller]) -> None:
    """The DeprecationWarning of `fields = frozenset({...})`, at the line of the plugin's class,
    as apid.plugin warns of a deprecated form (docs/compatibility.md)."""
    message = (
        f"{cls.__qualname__}: declaring the fields with `fields = frozenset({{...}})` is deprecated and read "
        f"until 0.3; declare them as `class {cls.__name__}(Controller, stores=(...))`"
    )
    try:
        filename, line = inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):  # a class made at run time has no source to point at
        filename, line = None, 0
    warnings.warn_explicit(message, DeprecationWarning, filename or cls.__module__, line, module=cls.__module__)


def _stored(stores: Table | Iterable[Table | str], cls: type[Controller]) -> frozenset[str]:
    if isinstance(stores, (Table, str)):
        stores = (stores,)
    names: set[str] = set()
    for each in stores:
        if isinstance(each, Table):
            names.update(str(column.key) for column in each.columns)
        elif isinstance(each, str):
            names.add(each)
        else:
            raise DeclarationError(
                f"{cls.__name__}: stores= takes Tables and field names, not {type(each).__name__} {each!r}"
            )
    return frozenset(names)


def check_declared(state: ControllerState, declared: Declared | None, plugin: str) -> None:
    """Hold `state` to the fields declared: refused when declared by `stores=`, warned about when
    declared the old way (until 0.3), not checked when undeclared."""
    if declared is None:
        return
    try:
        check_fields(state, declared.fields, plugin)
    except IOStateError as error:
        if declared.strict:
            raise
        log.warn(
            "{error}. {plugin} declares its fields as `fields = {{...}}`, which apid reads until 0.3 "
            "and only warns about: declare them as `class ...(Controller, stores=(...))` and these rules "
            "will be refused",
            error=str(error),
            plugin=plugin,
        )
