"""The package's request and answer types against openapi.json: field names, which are
required, the `status` variants of a token answer and the enums. Fails when they differ."""

from __future__ import annotations

import json
import typing
from enum import StrEnum
from typing import Any

import pytest
from conftest import OPENAPI
from pydantic import BaseModel

from mcp_connect import models, proxy

SPEC: dict[str, Any] = json.loads(OPENAPI.read_text(encoding="utf-8"))
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]

# component -> model. `status` is the union's tag, checked on its own below.
MODELS: dict[str, type[BaseModel]] = {
    "TokenBody": models.TokenRequest,
    "Connected": models.Connected,
    "ConnectRequired": models.ConnectRequired,
    "Declined": models.Declined,
    "ElicitationLink": models.ElicitationLink,
    "McpElicitation": models.McpElicitation,
    "Account": models.Account,
    "Elicitation": models.ElicitationInfo,
    "Cancelled": models.Cancelled,
    "ErrorBody": models.ErrorBody,
}


TAGGED = (models.Connected, models.ConnectRequired, models.Declined)

# Answer fields mcp-connect always sends now, which the package reads as optional on
# purpose: an older service leaves them out (issue 41). Their names must still match.
OPTIONAL_FOR_OLDER_SERVICES: dict[str, set[str]] = {
    "ConnectRequired": {"provider_name"},
    "Declined": {"provider_name"},
    "Cancelled": {"provider", "provider_name"},
    # Issue 42: an older service hands out the credential and does not say so.
    "Connected": {"hand_out"},
}


def wire_fields(model: type[BaseModel]) -> dict[str, bool]:
    """Wire name -> required, without the token answers' union tag."""
    tag = "status" if model in TAGGED else None
    return {(f.alias or name): f.is_required() for name, f in model.model_fields.items() if name != tag}


@pytest.mark.parametrize("component", sorted(MODELS))
def test_fields_and_required_ness_match_the_contract(component: str) -> None:
    schema = SCHEMAS[component]
    lenient = OPTIONAL_FOR_OLDER_SERVICES.get(component, set())
    required = set(schema.get("required", [])) - lenient
    spec_fields = {name: name in required for name in schema["properties"]}
    assert wire_fields(MODELS[component]) == spec_fields


def test_the_token_answer_variants_are_the_status_values_of_the_contract() -> None:
    spec: dict[str, str] = {}
    for variant in SCHEMAS["TokenAnswer"]["oneOf"]:
        ref, tag = variant["allOf"]
        assert "status" in tag["required"]
        (status,) = tag["properties"]["status"]["enum"]
        spec[status] = ref["$ref"].rsplit("/", 1)[1]
    union = typing.get_args(typing.get_args(models.TokenAnswer)[0])
    ours = {m.model_fields["status"].default: m.__name__ for m in union}
    assert ours == spec


@pytest.mark.parametrize(
    ("component", "enum"),
    [
        ("ElicitationStatus", models.ElicitationStatus),
        ("CancelReason", models.CancelReason),
        ("HandOutMode", models.HandOut),
    ],
)
def test_enums_match(component: str, enum: type[StrEnum]) -> None:
    assert [e.value for e in enum] == SCHEMAS[component]["enum"]


def test_every_error_code_the_package_names_is_in_the_contract() -> None:
    assert {e.value for e in models.ErrorCode} <= set(SCHEMAS["ErrorCode"]["enum"])


def test_the_operations_the_client_calls_exist() -> None:
    paths = SPEC["paths"]
    assert paths["/v1/token"]["post"]["operationId"] == "postToken"
    get = paths["/v1/elicitations/{id}"]["get"]
    assert get["operationId"] == "getElicitation"
    assert {p["name"] for p in get["parameters"] if p["in"] == "query"} == {"wait_seconds"}
    assert paths["/v1/elicitations/{id}/cancel"]["post"]["operationId"] == "cancelElicitation"


def test_the_cancel_body_is_a_reason() -> None:
    op = SPEC["paths"]["/v1/elicitations/{id}/cancel"]["post"]
    refs = [s["$ref"] for s in op["requestBody"]["content"]["application/json"]["schema"]["oneOf"] if "$ref" in s]
    (ref,) = refs
    body = SCHEMAS[ref.rsplit("/", 1)[1]]
    assert set(body["properties"]) == {"reason"}
    assert "CancelReason" in json.dumps(body["properties"]["reason"])


def test_the_proxy_headers_the_client_sends_are_the_contracts() -> None:
    path = SPEC["paths"]["/v1/proxy/{provider}/{path}"]
    for method in ("get", "post", "put", "patch", "delete", "head"):
        op = path[method]
        assert op["operationId"] == "proxy"
        headers = {p["name"].lower() for p in op["parameters"] if p["in"] == "header"}
        assert headers == set(proxy.ASK_HEADERS), method
