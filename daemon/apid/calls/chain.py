"""Chained calls: several endpoints in one request, each output's key feeding the next link.

The endpoint in the path is the first link; `chain.order` names the rest, in order, each
mapped to the field of its output handed to the next link (the last maps to `return`): the
SPEC's object `{"controller/action": "key", ...}` or, since JSON does not promise the order of
an object's members, an array `[{"link": "controller/action", "key": "key"}, ...]`. The
next link receives it under the name of its controller's FKEY to that field when it has one
the caller may send it (`person/show > team/list` passes `leaderId`), else as its `id`
(`handoff_field`). The request's method comes first: one no chain starting at the path's endpoint is
called with is a 405. A blankchain is called with GET, or with POST, which browsers' `fetch` can
send a body with. The whole chain is checked before any link runs: its length (before
the request is charged), its shape (at most one non-safe method, placed where `type` says,
matching the request's method), and the caller's right to call every link (each link
admitted on its own). Then each link
runs the rest of the single-call pipeline on its own (its fields admitted and typed, its
action, its output filtered); a failing link stops the chain and its problem says where, and
whether the non-safe call had already run.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apid.auth.tokens import Principal
from apid.calls.batch import parse_combine
from apid.calls.paths import Target
from apid.calls.pipeline import CallRequest, Pipeline
from apid.iostate import PATH_ID, ControllerState, Endpoint, RuleSet
from apid.problems import BadRequest, ChainRuleBroken, MethodNotAllowed, Problem
from apid.telemetry import metrics

RETURN = "return"
LINK_MEMBERS = frozenset({"link", "key"})  # an entry of the array form of `order`
BLANKCHAIN_METHODS = ("GET", "POST")


class ChainType(enum.Enum):
    POSTCHAIN = "postchain"
    PRECHAIN = "prechain"
    BLANKCHAIN = "blankchain"


@dataclass(frozen=True)
class Link:
    position: int
    controller: str
    action: str
    passes: str  # the field of this link's output handed to the next link, or "return"

    @property
    def path(self) -> str:
        return f"{self.controller}/{self.action}"


@dataclass(frozen=True)
class ChainRequest:
    links: tuple[Link, ...]
    type: ChainType
    combine: bool
    fields: Mapping[str, Any]  # the non-safe call's own fields: the body less `chain`


@dataclass(frozen=True)
class ChainOutcome:
    body: Any
    endpoint: Endpoint  # the last link's: the answer carries its links, for its record
    record: Any  # the last link's output


def _chain_object(body: Mapping[str, Any]) -> Mapping[str, Any]:
    chain = body.get("chain")
    if not isinstance(chain, dict):
        raise BadRequest(
            "a chain call needs a chain object in its JSON body",
            errors=[{"field": "chain", "reason": "must be an object"}],
        )
    unknown = sorted(set(chain) - {"key", "combine", "type", "order"})
    if unknown:
        raise BadRequest(
            f"the chain object has unknown members: {', '.join(unknown)}",
            errors=[{"field": f"chain.{name}", "reason": "is not a chain member"} for name in unknown],
        )
    return chain


def parse_chain(target: Target, body: Mapping[str, Any], method: str) -> ChainRequest:
    """The chain's links and settings; a malformed chain object is a 400 problem."""
    chain = _chain_object(body)
    key, order = chain.get("key"), chain.get("order")
    if not isinstance(key, str) or not key:
        raise BadRequest(
            "chain.key must name the field of the first link's output passed on",
            errors=[{"field": "chain.key", "reason": "must be a non-empty string"}],
        )
    entries = _order_entries(order)
    raw_type = chain.get("type")
    if raw_type is None:
        if method != "GET":
            raise BadRequest(
                "chain.type is required unless the chain is called with GET",
                errors=[{"field": "chain.type", "reason": "is required"}],
            )
        chain_type = ChainType.BLANKCHAIN
    else:
        try:
            chain_type = ChainType(raw_type)
        except ValueError:
            raise BadRequest(
                "chain.type must be postchain, prechain or blankchain",
                errors=[{"field": "chain.type", "reason": "must be postchain, prechain or blankchain"}],
            ) from None
    if target.action is None:
        raise BadRequest("the first link of a chain is the path's controller/action")

    links = [Link(0, target.controller, target.action, key)]
    for position, (field_name, name, passes) in enumerate(entries, start=1):
        controller, _, action = name.partition("/") if isinstance(name, str) else ("", "", "")
        if not controller or not action or not isinstance(passes, str) or not passes:
            raise BadRequest(
                f'chain.order entry {name!r} must be "controller/action" with the key it passes',
                errors=[{"field": field_name, "reason": "must map controller/action to a key"}],
            )
        links.append(Link(position, controller, action, passes))
    for link in links[:-1]:
        if link.passes == RETURN:
            raise BadRequest(
                f"only the last link may be marked return, not {link.path} (link {link.position})",
                errors=[{"field": _order_field(link), "reason": "only the last link may be marked return"}],
            )
    if links[-1].passes != RETURN:
        raise BadRequest(
            f"the last link, {links[-1].path}, must be marked return",
            errors=[{"field": _order_field(links[-1]), "reason": "the last link must be marked return"}],
        )
    fields = {name: value for name, value in body.items() if name != "chain"}
    return ChainRequest(
        links=tuple(links), type=chain_type, combine=parse_combine(chain.get("combine"), "chain.combine"), fields=fields
    )


def _order_entries(order: Any) -> list[tuple[str, Any, Any]]:
    """(field named in errors, "controller/action", key passed on) of each further link, from
    either form of `order`: the object (in JSON order) or the array of `{link, key}`."""
    if isinstance(order, dict) and order:
        return [(f"chain.order.{name}", name, passes) for name, passes in order.items()]
    if isinstance(order, list) and order:
        entries = []
        for index, entry in enumerate(order):
            if not isinstance(entry, dict) or set(entry) != LINK_MEMBERS:
                raise BadRequest(
                    f"chain.order[{index}] must be an object of link and key",
                    errors=[{"field": f"chain.order.{index}", "reason": "must be an object of link and key"}],
                )
            entries.append((f"chain.order.{index}", entry["link"], entry["key"]))
        return entries
    raise BadRequest(
        "chain.order must list each further link controller/action with the key it passes",
        errors=[{"field": "chain.order", "reason": "must be a non-empty object or array"}],
    )


def order_names(chain: Any) -> list[str]:
    """The "controller/action" of each further link a chain object names, in either form of
    `order`, skipping what is malformed (the chain is then refused when parsed): what the rate
    limits count before the chain is run."""
    order = chain.get("order") if isinstance(chain, dict) else None
    if isinstance(order, dict):
        return [name for name in order if isinstance(name, str)]
    if isinstance(order, list):
        return [e["link"] for e in order if isinstance(e, dict) and isinstance(e.get("link"), str)]
    return []


def _order_field(link: Link) -> str:
    return "chain.key" if link.position == 0 else f"chain.order.{link.path}"


def check_length(chain: ChainRequest, limit: int) -> None:
    """At most `limit` links (`chainLimit`), a 422 otherwise: checked first, before any link is
    looked up or anything charged, so a chain's cost is bounded before it is counted."""
    if len(chain.links) > limit:
        raise ChainRuleBroken(f"a chain holds at most {limit} links, this one {len(chain.links)}", rule="chain-limit")


def check_shape(chain: ChainRequest, endpoints: Sequence[Endpoint], method: str) -> None:
    """The chain rules of the specification; each broken rule is a 422 naming it."""
    unsafe = [i for i, endpoint in enumerate(endpoints) if not endpoint.is_safe]
    if len(unsafe) > 1:
        names = ", ".join(endpoints[i].path for i in unsafe)
        raise ChainRuleBroken(
            f"a chain holds at most one PUT, POST or DELETE call; this one has {names}", rule="one-non-safe-method"
        )
    if chain.type is ChainType.BLANKCHAIN:
        if unsafe:
            raise ChainRuleBroken(
                f"a blankchain holds only GET calls, not {endpoints[unsafe[0]].path}", rule="blankchain-safe-only"
            )
        expected: tuple[str, ...] = BLANKCHAIN_METHODS
    else:
        if not unsafe:
            raise ChainRuleBroken(
                f"a {chain.type.value} ends or begins with a PUT, POST or DELETE call; this one has none",
                rule="non-safe-method-required",
            )
        where = len(endpoints) - 1 if chain.type is ChainType.POSTCHAIN else 0
        if unsafe[0] != where:
            place = "last" if chain.type is ChainType.POSTCHAIN else "first"
            raise ChainRuleBroken(
                f"in a {chain.type.value} the non-safe call comes {place}; "
                f"{endpoints[unsafe[0]].path} is link {unsafe[0]}",
                rule="non-safe-method-position",
            )
        expected = (endpoints[unsafe[0]].method,)
    if method not in expected:
        raise ChainRuleBroken(
            f"this chain must be called with {' or '.join(expected)}, not {method}", rule="request-method"
        )


def chain_methods(first: Endpoint, rules: RuleSet, roles: frozenset[str]) -> list[str]:
    """The methods a chain starting at `first` may be called with: a PUT, POST or DELETE call
    starts a prechain, called with its own method; a GET starts a blankchain (GET or POST) or a
    postchain, called with the method of its last call, any non-safe endpoint the roles may call."""
    if not first.is_safe:
        return [first.method]
    return sorted({*BLANKCHAIN_METHODS, *rules.writing_methods(roles)})


class ChainRunner:
    def __init__(self, pipeline: Pipeline, limit: int) -> None:
        self._pipeline = pipeline
        self._limit = limit

    def _request(self, link: Link, target: Target, **fields: Any) -> CallRequest:
        return CallRequest(
            controller=link.controller, action=link.action, api_version=target.api_version, method=None, **fields
        )

    def _check_method(self, principal: Principal, target: Target, method: str) -> None:
        """405 for a method no chain starting at the path's endpoint can be called with, before
        the chain object is read (as a plain call's method is checked before its fields); an
        unknown first link is left to the chain rules (422 unknown-link)."""
        if target.action is None:
            return
        try:
            first = self._pipeline.endpoint(self._request(Link(0, target.controller, target.action, RETURN), target))
        except Problem:
            return
        allowed = chain_methods(first, self._pipeline.rules(), principal.roles)
        if method not in allowed:
            raise MethodNotAllowed(
                f"a chain starting with {first.path} is called with {', '.join(allowed)}, not {method}", allow=allowed
            )

    def parse(self, principal: Principal, target: Target, body: Mapping[str, Any], method: str) -> ChainRequest:
        """The chain a request asks for, read before it is charged to the caller's rate limit,
        so that one refused for its method (405), its chain object (400) or its length (422)
        costs nothing."""
        self._check_method(principal, target, method)
        chain = parse_chain(target, body, method)
        check_length(chain, self._limit)
        return chain

    async def run(
        self,
        principal: Principal,
        target: Target,
        chain: ChainRequest,
        method: str,
        text: Mapping[str, list[str]],
        address: str = "",
    ) -> ChainOutcome:
        endpoints = []
        requests = [self._request(link, target) for link in chain.links]
        for link, request in zip(chain.links, requests, strict=True):
            self._pipeline.check_anonymous(principal, request)
            try:
                endpoints.append(self._pipeline.endpoint(request))
            except Problem:
                raise ChainRuleBroken(
                    f"link {link.position}, {link.path}, is not an endpoint",
                    rule="unknown-link",
                    link={"position": link.position, "endpoint": link.path},
                ) from None
        check_shape(chain, endpoints, method)
        metrics.chain_run(len(chain.links))
        admitted = [self._pipeline.admit(principal, request, address=address) for request in requests]
        # receives[i]: the field link i + 1 gets link i's key in, decided before any link runs
        receives = [
            handoff_field(
                source.state.name, link.passes, following.state, following.endpoint.request_fields(following.granted)
            )
            for link, source, following in zip(
                chain.links, admitted, admitted[1:], strict=False
            )  # the last passes nothing
        ]

        outputs: list[Any] = []
        passed: dict[str, list[str]] = {}
        non_safe_done = False
        for link, admission in zip(chain.links, admitted, strict=True):
            endpoint = admission.endpoint
            call_text = dict(text) if link.position == 0 else dict(passed)
            # the key handed on by the previous link names the record; the body cannot override it
            call_body = (
                {} if endpoint.is_safe else {name: value for name, value in chain.fields.items() if name not in passed}
            )
            call = self._request(link, target, body=call_body, text=call_text)
            try:
                output = (await self._pipeline.execute(admission, call)).data
            except Problem as problem:
                problem.extensions.update(
                    link={"position": link.position, "endpoint": link.path}, nonSafeCallCompleted=non_safe_done
                )
                raise
            non_safe_done = non_safe_done or not endpoint.is_safe
            outputs.append(output)
            if link.passes != RETURN:
                passed = {receives[link.position]: [_passed_key(output, link, non_safe_done)]}
        return ChainOutcome(
            body=outputs if chain.combine else outputs[-1], endpoint=admitted[-1].endpoint, record=outputs[-1]
        )


def handoff_field(source: str, key: str, target: ControllerState, accepted: frozenset[str]) -> str:
    """The request field in which the next link receives the value of field `key` read from
    controller `source`'s output: the first FKEY, in VALUES order, of the next link's
    controller that references that field and that the next link accepts from the caller's
    roles (`accepted`); else `id`, which then names a record of the next link's controller."""
    return next(
        (spec.name for spec in target.values.values() if spec.references(source, key) and spec.name in accepted),
        PATH_ID,
    )


def _passed_key(output: Any, link: Link, non_safe_done: bool) -> str:
    """The value of the link's key in its output, as text, for the next link's request."""
    if not isinstance(output, Mapping) or output.get(link.passes) is None:
        raise ChainRuleBroken(
            f"link {link.position}, {link.path}, returned no {link.passes!r} to pass on (or your role may not see it)",
            rule="missing-key",
            link={"position": link.position, "endpoint": link.path},
            key=link.passes,
            nonSafeCallCompleted=non_safe_done,
        )
    value = output[link.passes]
    return "true" if value is True else "false" if value is False else str(value)
