"""What the public service endpoints read from their query (apid.auth.endpoints): `/error`'s
status, three ASCII digits naming an error status or a 400 naming the parameter."""

from __future__ import annotations

import pytest

from apid.problems import InvalidFields
from apid.server.service_endpoints import error_status


@pytest.mark.parametrize(
    "query, status",
    [
        ({}, 500),
        ({"status": ["502"]}, 502),
        ({"status": ["404"]}, 404),
        ({"status": ["511"]}, 511),
        ({"status": ["400"]}, 400),
    ],
)
def test_error_renders_the_status_asked_for_or_500(query, status):
    assert error_status(query) == status


@pytest.mark.parametrize(
    "text",
    [
        "\u00b2",
        "5\u00b2",
        "\u0665\u0660\u0662",
        "\uff15\uff10\uff12",  # superscript, Arabic-Indic, full-width digits
        "9" * 5000,
        "0502",
        "+502",
        "-502",
        " 502",
        "502 ",
        "5e2",
        "502.0",
        "",
        "200",
        "302",
        "600",
        "999",
        "499",
        "abc",  # digits, but no error status HTTP names
    ],
)
def test_anything_but_an_error_status_in_three_ascii_digits_is_400_naming_status(text):
    with pytest.raises(InvalidFields) as refused:
        error_status({"status": [text]})
    assert refused.value.status == 400
    assert refused.value.extensions["errors"] == [
        {"field": "status", "reason": "must be given once, an error status HTTP names from 400 to 599"}
    ]


def test_a_status_given_twice_is_400():
    with pytest.raises(InvalidFields):
        error_status({"status": ["502", "404"]})
