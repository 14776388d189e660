"""The daemon's own classes keep the protocols of `apid.plugin`, checked by mypy (`make check`):
a plugin written against the face runs against the real services. Each function below only
type-checks while the real class is what the protocol says; nothing here runs."""

from __future__ import annotations

from apid import iostate, plugin
from apid.auth import account_service, accounts, key_service
from apid.config import api as config
from apid.hooks.service import Hooks
from apid.server import peers as ping
from apid.store import database


def database_is_a_database(db: database.Database) -> plugin.Database:
    return db


def database_is_a_unit_of_work(db: database.Database) -> plugin.UnitOfWork:
    return db


def a_call_is_a_unit_of_work(call: plugin.Call) -> plugin.UnitOfWork:
    return call


def accounts_are_accounts(service: account_service.Accounts) -> plugin.Accounts:
    return service


def an_account_is_an_account(account: accounts.Account) -> plugin.Account:
    return account


def security_settings(security: config.SecurityConfig) -> plugin.SecuritySettings:
    return security


def a_pinger(pinger: ping.PeerPinger) -> plugin.PeerPinger:
    return pinger


def hooks_are_hooks(service: Hooks) -> plugin.Hooks:
    return service


def keys_are_keys(service: key_service.ApiKeys) -> plugin.Keys:
    return service


def an_endpoint(endpoint: iostate.Endpoint) -> plugin.Endpoint:
    return endpoint


def a_rule_set(rules: iostate.RuleSet) -> plugin.RuleSet:
    return rules
