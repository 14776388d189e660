"""A third-party plugin written from apid 0.1's docs, frozen in tests/directory_plugin, runs on
this apid unchanged (issue 35, item 1): its controllers' own `table` and `fields` attributes
mean nothing to apid, so its IO State, which names the paging fields it reads itself, binds;
the daemon starts with it installed, migrates its schema and serves it beside apid's own.

It is installed as pip would leave it (a `.dist-info` with its entry points) in a folder of
the daemon's own on PYTHONPATH, so that no other daemon of the suite serves it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import ADMIN, V, deployment_with_accounts, running_daemon

PLUGIN = Path(__file__).resolve().parents[1] / "directory_plugin"
ENTRY_POINTS = """[apid.controllers]
company = apid_directory:CompanyController
department = apid_directory:DepartmentController

[apid.migrations]
directory = apid_directory.migrations
"""


def installed(root: Path) -> dict[str, str]:
    """The environment of a daemon that finds the plugin installed."""
    site = root / "site"
    info = site / "apid_directory-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apid-directory\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(PLUGIN), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    root = tmp_path_factory.mktemp("directory")
    with running_daemon(deployment_with_accounts(root / "deployment"), env=installed(root)) as daemon:
        daemon.token = daemon.login(ADMIN[0], ADMIN[1])
        yield daemon


def call(daemon, method: str, path: str, body=None):
    answer = daemon.request(method, f"{V}/{path}", body, token=daemon.token)
    assert answer.status == 200, answer.body
    return answer.json


def test_the_daemon_serves_the_0_1_plugin_beside_its_own(daemon):
    acme = call(daemon, "POST", "company/create", {"name": "Acme"})
    assert acme == {"id": acme["id"], "name": "Acme"}
    assert call(daemon, "GET", f"company/show/{acme['id']}") == acme
    assert call(daemon, "GET", "person/show/1")["username"] == ADMIN[0]
    assert "is not one the controller" not in daemon.stderr


def test_its_paging_fields_reach_its_own_code(daemon):
    acme = call(daemon, "POST", "company/create", {"name": "Paged"})
    made = [
        call(daemon, "POST", "department/create", {"companyId": acme["id"], "name": name})
        for name in ("Sales", "Legal", "Research")
    ]
    page = call(daemon, "GET", f"department/list?companyId={acme['id']}&offset=1&max=1")
    assert page == [made[1]]
    refused = daemon.request("GET", f"{V}/department/list?companyId={acme['id']}&max=1000", token=daemon.token)
    assert refused.status == 400 and "max" in refused.body.decode()


def test_load_plugins_serves_the_plugins_named_and_apids_own_only(tmp_path):
    """`loadPlugins` (what `ApidDaemon(plugins=...)` sets): the sample plugin, installed too, is
    not served, and its migrations do not run; a name no installed distribution has stops the start."""
    env = installed(tmp_path)
    only = deployment_with_accounts(tmp_path / "only", server={"loadPlugins": ["apid-directory"]})
    with running_daemon(only, env=env) as daemon:
        token = daemon.login(ADMIN[0], ADMIN[1])
        assert daemon.request("POST", f"{V}/company/create", {"name": "Only"}, token=token).status == 200
        assert daemon.request("GET", f"{V}/team/list", token=token).status == 404
        assert daemon.request("GET", f"{V}/person/show/1", token=token).status == 200
    misspelt = deployment_with_accounts(tmp_path / "misspelt", server={"loadPlugins": ["apid-directroy"]})
    done = misspelt.cli("serve", env=env)
    assert done.returncode == 1
    assert "loadPlugins names apid-directroy, which no installed distribution" in done.stderr


def test_a_plugin_that_cannot_load_takes_the_others_down_only_unless_the_operator_allows_it(tmp_path):
    """`pluginFailure: skip`: a plugin whose module is gone is left out, named in the log, and the
    0.1 plugin and apid's own serve; by default the start is refused naming it."""
    env = installed(tmp_path)
    info = tmp_path / "site" / "apid_gone-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apid-gone\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[apid.controllers]\ngone = apid_gone:GoneController\n")
    refused = deployment_with_accounts(tmp_path / "refused").cli("serve", env=env)
    assert refused.returncode == 1
    assert "plugin gone (distribution apid-gone) failed to load: ModuleNotFoundError" in refused.stderr
    skipping = deployment_with_accounts(tmp_path / "skipping", server={"pluginFailure": "skip"})
    with running_daemon(skipping, env=env) as daemon:
        token = daemon.login(ADMIN[0], ADMIN[1])
        assert daemon.request("POST", f"{V}/company/create", {"name": "Still"}, token=token).status == 200
        assert daemon.request("GET", f"{V}/gone/list", token=token).status == 404
    assert "plugin gone (distribution apid-gone) failed to load" in daemon.stderr
    assert "left out (pluginFailure: skip)" in daemon.stderr
