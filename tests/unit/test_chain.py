"""Chain parsing and the chain rules, including a property: any sequence of methods is
accepted exactly when the specification allows it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apid.calls.chain import (
    ChainRequest,
    ChainRuleBroken,
    ChainType,
    Link,
    chain_methods,
    check_length,
    check_shape,
    handoff_field,
    order_names,
    parse_chain,
)
from apid.calls.paths import Target
from apid.iostate import ApiVersion, ControllerState, Endpoint, FieldSpec, RoleFields, RuleSet
from apid.iostate.types import value_type
from apid.problems import BadRequest

METHODS = ("GET", "POST", "PUT", "DELETE")
NO_FIELDS = RoleFields(permit_all=frozenset(), by_role={})


def endpoint(method: str, index: int = 0, role: str = "ROLE_ADMIN") -> Endpoint:
    return Endpoint(
        controller="c",
        action=f"a{index}",
        api_version="1",
        method=method,
        description="",
        roles=frozenset({role}),
        batch_roles=frozenset(),
        hook_roles=frozenset(),
        request=NO_FIELDS,
        response=NO_FIELDS,
    )


def chain_of(kind: ChainType, count: int) -> ChainRequest:
    links = tuple(Link(i, "c", f"a{i}", "return" if i == count - 1 else "id") for i in range(count))
    return ChainRequest(links=links, type=kind, combine=False, fields={})


def allowed(methods: list[str], kind: ChainType, request_method: str) -> bool:
    """The specification's chain rules, stated directly (the length aside: `check_length`)."""
    unsafe = [i for i, m in enumerate(methods) if m != "GET"]
    if len(unsafe) > 1:
        return False
    if kind is ChainType.BLANKCHAIN:
        return not unsafe and request_method in ("GET", "POST")  # POST: what browsers send a body with
    if not unsafe:
        return False
    place = len(methods) - 1 if kind is ChainType.POSTCHAIN else 0
    return unsafe[0] == place and request_method == methods[place]


@given(
    methods=st.lists(st.sampled_from(METHODS), min_size=2, max_size=12),
    kind=st.sampled_from(list(ChainType)),
    request_method=st.sampled_from(METHODS),
)
def test_chain_shapes_are_accepted_exactly_when_the_rules_allow(methods, kind, request_method):
    endpoints = [endpoint(m, i) for i, m in enumerate(methods)]
    chain = chain_of(kind, len(methods))
    if allowed(methods, kind, request_method):
        check_shape(chain, endpoints, request_method)
    else:
        with pytest.raises(ChainRuleBroken) as broken:
            check_shape(chain, endpoints, request_method)
        assert broken.value.status == 422 and broken.value.extensions["rule"]


def test_a_second_non_safe_method_names_both_links():
    endpoints = [endpoint("POST", 0), endpoint("GET", 1), endpoint("PUT", 2)]
    with pytest.raises(ChainRuleBroken) as broken:
        check_shape(chain_of(ChainType.PRECHAIN, 3), endpoints, "POST")
    assert broken.value.extensions["rule"] == "one-non-safe-method"
    assert "c/a0" in broken.value.detail and "c/a2" in broken.value.detail


TARGET = Target(kind="c", api_version=None, controller="team", action="show", id="1")


def test_order_keeps_its_json_order_and_the_path_endpoint_is_the_first_link():
    chain = parse_chain(
        TARGET,
        {
            "chain": {
                "key": "leaderId",
                "type": "postchain",
                "order": {"person/show": "id", "person/update": "return"},
            },
            "email": "a@example.com",
        },
        "PUT",
    )
    assert [(link.position, link.path, link.passes) for link in chain.links] == [
        (0, "team/show", "leaderId"),
        (1, "person/show", "id"),
        (2, "person/update", "return"),
    ]
    assert chain.fields == {"email": "a@example.com"}
    assert chain.type is ChainType.POSTCHAIN and chain.combine is False


@pytest.mark.parametrize(
    "combine, expected", [(True, True), ("true", True), ("false", False), (False, False), (None, False)]
)
def test_combine_takes_a_boolean_or_its_string(combine, expected):
    body = {"chain": {"key": "k", "type": "blankchain", "order": {"a/b": "return"}, "combine": combine}}
    assert parse_chain(TARGET, body, "GET").combine is expected


def test_a_chain_is_called_with_its_prechain_method_or_get_and_the_methods_a_postchain_may_end_with():
    endpoints = {
        e.action: e
        for e in (
            endpoint("GET", 0),
            endpoint("PUT", 1),
            endpoint("DELETE", 2),
            endpoint("POST", 3),
            endpoint("PUT", 4, role="ROLE_USER"),
        )
    }
    rules = RuleSet(
        controllers={
            "c": ControllerState(
                name="c",
                network_group="public",
                values={},
                current_stable="1",
                source="test",
                versions={"1": ApiVersion(name="1", default_action=None, deprecated=None, endpoints=endpoints)},
            )
        }
    )
    assert chain_methods(endpoints["a1"], rules, frozenset({"ROLE_ADMIN"})) == ["PUT"]
    assert chain_methods(endpoints["a0"], rules, frozenset({"ROLE_ADMIN"})) == ["DELETE", "GET", "POST", "PUT"]
    assert chain_methods(endpoints["a0"], rules, frozenset({"ROLE_USER"})) == ["GET", "POST", "PUT"]  # a blank POST


def test_order_may_be_an_array_of_links_in_their_order():
    order = [{"link": "person/show", "key": "id"}, {"link": "team/list", "key": "return"}]
    chain = parse_chain(TARGET, {"chain": {"key": "leaderId", "type": "blankchain", "order": order}}, "POST")
    assert [link.path for link in chain.links] == ["team/show", "person/show", "team/list"]
    assert [link.passes for link in chain.links] == ["leaderId", "id", "return"]
    assert order_names({"order": order}) == order_names({"order": {"person/show": "id", "team/list": "return"}})


@pytest.mark.parametrize("entry", [{"link": "person/show"}, {"link": "person/show", "key": "return", "x": 1}, "a/b"])
def test_a_malformed_array_entry_is_a_400_naming_its_index(entry):
    with pytest.raises(BadRequest) as raised:
        parse_chain(TARGET, {"chain": {"key": "id", "order": [entry]}}, "GET")
    assert raised.value.extensions["errors"][0]["field"] == "chain.order.0"


def test_a_blankchain_may_be_called_with_get_or_post_only():
    chain = chain_of(ChainType.BLANKCHAIN, 2)
    for method in ("GET", "POST"):
        check_shape(chain, [endpoint("GET", 0), endpoint("GET", 1)], method)
    with pytest.raises(ChainRuleBroken):
        check_shape(chain, [endpoint("GET", 0), endpoint("GET", 1)], "PUT")


def test_a_get_chain_without_type_is_a_blankchain():
    chain = parse_chain(TARGET, {"chain": {"key": "k", "order": {"a/b": "return"}}}, "GET")
    assert chain.type is ChainType.BLANKCHAIN


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "chain"),
        ({"chain": []}, "chain"),
        ({"chain": {"order": {"a/b": "return"}, "type": "postchain"}}, "chain.key"),
        ({"chain": {"key": "k", "type": "postchain"}}, "chain.order"),
        ({"chain": {"key": "k", "order": {}, "type": "postchain"}}, "chain.order"),
        ({"chain": {"key": "k", "order": {"a/b": "return"}, "type": "sideways"}}, "chain.type"),
        ({"chain": {"key": "k", "order": {"a/b": "return"}}}, "chain.type"),
        ({"chain": {"key": "k", "order": {"ab": "return"}, "type": "postchain"}}, "chain.order.ab"),
        ({"chain": {"key": "k", "order": {"a/b": "return"}, "type": "postchain", "combine": "maybe"}}, "chain.combine"),
        ({"chain": {"key": "k", "order": {"a/b": "return"}, "type": "postchain", "extra": 1}}, "chain.extra"),
    ],
)
def test_a_malformed_chain_object_is_a_400_naming_the_member(body, field):
    with pytest.raises(BadRequest) as bad:
        parse_chain(TARGET, body, "PUT")
    assert bad.value.status == 400
    assert field in [e["field"] for e in bad.value.extensions["errors"]]


@pytest.mark.parametrize("order", [{"a/b": "return", "c/d": "return"}, {"a/b": "id"}])
def test_only_and_always_the_last_link_is_marked_return(order):
    with pytest.raises(BadRequest, match="return"):
        parse_chain(TARGET, {"chain": {"key": "k", "type": "blankchain", "order": order}}, "GET")


def test_too_many_links_is_a_422():
    check_length(chain_of(ChainType.BLANKCHAIN, 3), limit=3)
    with pytest.raises(ChainRuleBroken) as broken:
        check_length(chain_of(ChainType.BLANKCHAIN, 4), limit=3)
    assert broken.value.status == 422 and broken.value.extensions["rule"] == "chain-limit"
    assert broken.value.detail == "a chain holds at most 3 links, this one 4"


# --- the field a link receives the previous link's key in -----------------------------------------


def department(*fkeys: tuple[str, str, str]) -> ControllerState:
    """A department controller whose VALUES hold `id` (PKEY) and the given (name, controller, field) FKEYs."""
    long = value_type("Long")
    values = {"id": FieldSpec(name="id", type=long, description="", key="PKEY")}
    values.update(
        {
            name: FieldSpec(
                name=name, type=long, description="", key="FKEY", reference=controller, referenced_field=field
            )
            for name, controller, field in fkeys
        }
    )
    return ControllerState(
        name="department", network_group="public", values=values, current_stable="1", versions={}, source="test"
    )


def test_a_key_read_from_the_field_an_fkey_references_goes_under_the_fkey():
    target = department(("companyId", "company", "id"))
    assert handoff_field("company", "id", target, frozenset({"id", "companyId"})) == "companyId"


@pytest.mark.parametrize(
    "source, key, accepted",
    [
        ("company", "id", frozenset({"id"})),  # the link does not take the FKEY from these roles
        ("company", "code", frozenset({"id", "companyId"})),  # read from another field than the referenced one
        ("person", "id", frozenset({"id", "companyId"})),  # read from another controller
    ],
)
def test_otherwise_the_key_goes_under_id_as_before(source, key, accepted):
    assert handoff_field(source, key, department(("companyId", "company", "id")), accepted) == "id"


def test_of_two_fkeys_to_the_same_field_the_first_the_link_takes_in_values_order_wins():
    target = department(("headId", "person", "id"), ("deputyId", "person", "id"))
    assert handoff_field("person", "id", target, frozenset({"headId", "deputyId"})) == "headId"
    assert handoff_field("person", "id", target, frozenset({"deputyId"})) == "deputyId"
