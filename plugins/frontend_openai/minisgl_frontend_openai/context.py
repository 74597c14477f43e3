"""What every route handler of the app shares: the engine client, the served names, the metrics
and the generations in flight."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from minisgl_core.api import EngineClient, RequestRejected
from minisgl_frontend_openai.errors import APIError
from minisgl_frontend_openai.generation import Generation
from minisgl_frontend_openai.metrics import FrontendMetrics

CLIENT_CLOSED_REQUEST = 499  # never seen by anyone: the client is gone (nginx's convention)


@dataclass(frozen=True)
class AppContext:
    """One app's shared state; ``live`` holds the generations not yet closed (empty when idle)."""

    client: EngineClient
    metrics: FrontendMetrics
    started: int  # unix seconds, the models' ``created``
    served_model_names: tuple[str, ...] = ()  # --served-model-name; empty: the engine's name
    aliases: tuple[str, ...] = ()  # the ``model_aliases`` option: accepted and listed too
    accept_any_model: bool = False  # the ``accept_any_model`` option: any name gets names[0]
    reasoning_end: str | None = None  # what ends thinking under --reasoning-parser (None: none)
    live: set[Generation] = field(default_factory=set)

    def served_names(self) -> list[str]:
        """Every name a request's ``model`` may take; the first is reported."""
        primary = self.served_model_names or (self.client.model_name,)
        return list(dict.fromkeys((*primary, *self.aliases)))

    def check_model(self, name: str | None) -> str:
        """The reported name; RequestRejected ``model_not_found`` (a 404) for a name not
        served, unless ``accept_any_model`` (a single-model server answering every name)."""
        names = self.served_names()
        if name is not None and name not in names and not self.accept_any_model:
            raise RequestRejected(f"The model '{name[:100]}' does not exist", param="model",
                                  code="model_not_found")
        return names[0]

    def model_card(self, name: str) -> dict[str, object]:
        """The /v1/models entry of ``name``."""
        card: dict[str, object] = {"id": name, "object": "model", "created": self.started,
                                   "owned_by": "minisgl", "max_model_len": self.client.max_context}
        facts = getattr(self.client, "engine_facts", None)  # dtype (and why), kernels in use
        if facts:
            card["meta"] = dict(facts)
        return card


def unavailable() -> APIError:
    """The 503 for an engine that is not ready or not running."""
    return APIError(503, "the engine is not ready or not running", type="server_error",
                    code="engine_unavailable")


def context_of(request: Request) -> AppContext:
    """The AppContext of the app serving ``request``."""
    ctx: AppContext = request.app.state.ctx
    return ctx
