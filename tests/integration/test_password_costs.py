"""Argon2id's costs (`passwords` in service_server.yml) through the real daemon and `apid user
add`: what is stored is hashed with the deployment's costs, and an operator who changes them
locks nobody out."""

from __future__ import annotations

import sqlite3

from argon2 import extract_parameters

from harness import ADMIN, deployment_with_accounts, new_person, running_daemon


def stored_costs(database: str, username: str) -> tuple[int, int, int]:
    with sqlite3.connect(database) as connection:
        (stored,) = connection.execute("SELECT password FROM person WHERE username = ?", (username,)).fetchone()
    made = extract_parameters(stored)
    return made.time_cost, made.memory_cost, made.parallelism


def test_hashes_take_the_costs_and_survive_their_change(tmp_path):
    first = {"timeCost": 2, "memoryCost": 2048, "parallelism": 1}
    deployment = deployment_with_accounts(tmp_path, server={"passwords": first})
    database = str(tmp_path / "var" / "test.db")
    assert stored_costs(database, ADMIN[0]) == (2, 2048, 1)  # apid user add

    with running_daemon(deployment) as daemon:
        made = new_person(daemon, daemon.login(*ADMIN[:2]))
    assert stored_costs(database, made["username"]) == (2, 2048, 1)  # the daemon

    deployment.server["passwords"] = {"timeCost": 1, "memoryCost": 1024, "parallelism": 2}
    deployment.write()
    with running_daemon(deployment) as daemon:
        token = daemon.login(made["username"], made["password"])  # its hash keeps its own costs
        refused = daemon.request("POST", "/authenticate", {"username": made["username"], "password": "not-it-at-all"})
        assert refused.status == 401
        changed = daemon.request(
            "PUT",
            f"/v0.1/person/update/{made['id']}",
            {"password": "a-new-password-here", "currentPassword": made["password"], "version": 0},
            token=token,
        )
        assert changed.status == 200, changed.body
        assert stored_costs(database, made["username"]) == (1, 1024, 2)  # a new password takes the new costs
        assert daemon.login(made["username"], "a-new-password-here")
