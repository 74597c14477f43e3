"""The frontend's OpenAPI 3.1 document, built from its own request models (/openapi.json)."""

from __future__ import annotations

from typing import Any

from minisgl_frontend_openai.responses_input import ResponsesRequest
from minisgl_frontend_openai.schemas import ChatCompletionRequest, CompletionRequest
from minisgl_frontend_openai.tokenize_routes import DetokenizeRequest, TokenizeRequest


def openapi_document(version: str) -> dict[str, Any]:
    """Describe every route, with the request bodies the strict request models accept.

    FastAPI's generated document cannot: the routes read raw bodies so that every validation
    error gets the OpenAI envelope instead of FastAPI's 422.
    """
    components: dict[str, Any] = {}

    def body(model: Any) -> dict[str, Any]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
        ref = {"$ref": f"#/components/schemas/{model.__name__}"}
        return {"required": True, "content": {"application/json": {"schema": ref}}}

    answers = {"200": {"description": "the answer"},
               "default": {"description": "an error in the OpenAI error envelope"}}
    model_param = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
    stored = {**model_param, "name": "response_id"}
    paths = {
        "/v1/chat/completions": {"post": {"requestBody": body(ChatCompletionRequest),
                                          "responses": answers}},
        "/v1/completions": {"post": {"requestBody": body(CompletionRequest),
                                     "responses": answers}},
        "/tokenize": {"post": {"requestBody": body(TokenizeRequest), "responses": answers}},
        "/detokenize": {"post": {"requestBody": body(DetokenizeRequest), "responses": answers}},
        "/v1/responses": {"post": {"requestBody": body(ResponsesRequest), "responses": answers}},
        "/v1/responses/{response_id}": {"get": {"parameters": [stored], "responses": answers},
                                        "delete": {"parameters": [stored],
                                                   "responses": answers}},
        "/v1/responses/{response_id}/input_items": {"get": {"parameters": [stored],
                                                            "responses": answers}},
        "/v1/models": {"get": {"responses": answers}},
        "/v1/models/{model}": {"get": {"parameters": [model_param], "responses": answers}},
        "/health": {"get": {"responses": answers}},
        "/metrics": {"get": {"responses": answers}},
    }
    return {"openapi": "3.1.0", "info": {"title": "minisgl", "version": version},
            "paths": paths, "components": {"schemas": components}}
