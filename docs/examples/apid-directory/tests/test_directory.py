"""The directory through apid's real request path, in memory (`apid.testing`): roles and
fields from IO State, links both ways, a chain from a company to its departments, webhook
events, and what the tables hold."""

import json
from importlib import resources

import pytest
from apid_directory.company import CompanyController
from apid_directory.department import DepartmentController
from sqlalchemy import text

from apid.testing import InMemoryApid

CONTROLLERS = [CompanyController, DepartmentController]


@pytest.fixture
def apid():
    with InMemoryApid(CONTROLLERS, migrations=["apid_directory.migrations"]) as kit:
        yield kit


def test_an_admin_creates_a_company_that_a_user_may_read(apid):
    admin, user = apid.caller("ROLE_ADMIN"), apid.caller("ROLE_USER")
    created = apid.post("/v0.1/company/create", {"name": "Acme"}, caller=admin)
    assert created.status == 200
    assert created.json == {"id": 1, "name": "Acme", "createdBy": admin.id, "version": 0}
    assert [(event.type, event.data["name"]) for event in apid.events] == [("company/create", "Acme")]
    shown = apid.get("/v0.1/company/show/1", caller=user)
    assert shown.json == {"id": 1, "name": "Acme", "version": 0}  # createdBy: administrators only


def test_a_user_may_not_create_a_company(apid):
    reply = apid.post("/v0.1/company/create", {"name": "Acme"}, caller=apid.caller("ROLE_USER"))
    assert reply.status == 403 and reply.problem["title"] == "Forbidden"
    assert apid.events == []


def test_what_the_tables_refuse_is_the_problem_it_means(apid):
    admin = apid.caller("ROLE_ADMIN")
    apid.post("/v0.1/company/create", {"name": "Acme"}, caller=admin)
    assert apid.post("/v0.1/company/create", {"name": "Acme"}, caller=admin).status == 409
    nowhere = apid.post("/v0.1/department/create", {"companyId": 7, "name": "Sales"}, caller=admin)
    assert nowhere.status == 400
    assert nowhere.problem["errors"] == [{"field": "companyId", "reason": "is not the id of a company"}]


def test_a_company_links_to_its_departments_and_a_department_to_its_company(apid):
    admin = apid.caller("ROLE_ADMIN")
    apid.post("/v0.1/company/create", {"name": "Acme"}, caller=admin)
    apid.post("/v0.1/department/create", {"companyId": 1, "name": "Sales"}, caller=admin)
    user = apid.caller("ROLE_USER")

    company = apid.get("/v0.1/company/show/1", caller=user, links=True)
    assert {
        "href": "/v0.1/department/list?companyId=1",
        "rel": "urn:apid:rel:department/list",
        "method": "GET",
    } in company.links
    department = apid.get("/v0.1/department/show/1", caller=user, links=True)
    assert {"href": "/v0.1/company/show/1", "rel": "urn:apid:rel:company/show", "method": "GET"} in department.links


def test_no_link_to_departments_for_a_role_that_may_not_list_them(tmp_path):
    # an operator's file in iostateDir overrides the one the plugin ships: only admins list departments
    rules = json.loads(resources.files("apid_directory").joinpath("iostate/department.json").read_text())
    rules["VERSION"]["1"]["URI"]["list"]["ROLES"] = {"DEFAULT": ["ROLE_ADMIN"], "BATCH": ["ROLE_ADMIN"]}
    (tmp_path / "department.json").write_text(json.dumps(rules))
    with InMemoryApid(CONTROLLERS, migrations=["apid_directory.migrations"], iostate_dir=tmp_path) as apid:
        admin, user = apid.caller("ROLE_ADMIN"), apid.caller("ROLE_USER")
        apid.post("/v0.1/company/create", {"name": "Acme"}, caller=admin)
        hrefs = [link["href"] for link in apid.get("/v0.1/company/show/1", caller=user, links=True).links]
        assert "/v0.1/department/list?companyId=1" not in hrefs
        hrefs = [link["href"] for link in apid.get("/v0.1/company/show/1", caller=admin, links=True).links]
        assert "/v0.1/department/list?companyId=1" in hrefs


def test_a_chain_goes_from_a_company_to_its_departments(apid):
    admin = apid.caller("ROLE_ADMIN")
    for name in ("Acme", "Globex"):
        apid.post("/v0.1/company/create", {"name": name}, caller=admin)
    apid.batch(
        "department/create",
        [{"companyId": 1, "name": "Sales"}, {"companyId": 2, "name": "Labs"}, {"companyId": 1, "name": "Ops"}],
        caller=admin,
    )
    reply = apid.chain(
        "GET",
        "company/show/1",
        {"key": "id", "order": {"company/show": "id", "department/list": "return"}},
        caller=apid.caller("ROLE_USER"),
    )
    assert reply.status == 200, reply.problem
    assert [d["name"] for d in reply.json] == ["Sales", "Ops"]  # company 1's, handed on as companyId


def test_deleting_a_company_deletes_its_departments(apid):
    admin = apid.caller("ROLE_ADMIN")
    apid.post("/v0.1/company/create", {"name": "Acme"}, caller=admin)
    apid.post("/v0.1/department/create", {"companyId": 1, "name": "Sales"}, caller=admin)
    assert apid.delete("/v0.1/company/delete/1", caller=admin).json == {"id": 1, "name": "Acme"}
    assert apid.get("/v0.1/department/show/1", caller=admin).status == 404
    with apid.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM directory_department")).scalar() == 0
