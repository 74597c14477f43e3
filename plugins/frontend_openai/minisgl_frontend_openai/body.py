"""Request bodies' common ground: the strict pydantic base, and one 400 for a body that does not
validate (naming the first bad field and why, never echoing the input)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from minisgl_core.api import RequestRejected
from minisgl_frontend_openai.errors import bad_request


class Strict(BaseModel):
    """A request body: strict types (a string where a number belongs is a 400, not a silent
    coercion); unknown fields are kept in ``model_extra`` for ``check`` to judge."""

    model_config = ConfigDict(strict=True, extra="allow")

    def check(self) -> None:
        """Reject what the field types cannot express (a 400); nothing by default."""


_B = TypeVar("_B", bound=Strict)


def parse(model: type[_B], body: bytes) -> _B:
    """Validate a JSON body into ``model``, or raise a 400 that does not echo the input."""
    try:
        req = model.model_validate_json(body)
    except ValidationError as exc:
        raise describe(exc) from None
    req.check()
    return req


def describe(exc: ValidationError) -> RequestRejected:
    """One 400 naming the first invalid field and why, without the offending value."""
    errors = exc.errors(include_input=False, include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        return bad_request(f"Invalid JSON body: {first['msg'].removeprefix('Invalid JSON: ')}",
                           code="invalid_json")
    path = [str(p) for p in first["loc"] if not _is_union_tag(p)]
    param = ".".join(path) or None
    if first["type"] == "model_type" and not path:
        return bad_request("the request body must be a JSON object")
    if first["type"] == "missing":
        return bad_request(f"'{param}' is required", param=param)
    # a union field fails once per member: say what each member wanted, once
    same = [e["msg"] for e in errors
            if [str(p) for p in e["loc"] if not _is_union_tag(p)] == path]
    reasons = " or ".join(dict.fromkeys(same[:4]))
    return bad_request(f"Invalid value for '{param}': {reasons}", param=param)


def _is_union_tag(p: int | str) -> bool:
    # pydantic puts the union member ("str", "list[str]", "ContentPart") into error locations
    return isinstance(p, str) and (
        "[" in p or p[:1].isupper() or p in {"str", "int", "float", "bool", "none"})
