"""The public plugin API: every name a plugin imports, from one module that stays put.

``from minisgl_core.api import hookimpl, GenerateRequest, ...``. What is listed in ``__all__`` (and
in docs/plugins.md, "What is public") keeps its name and meaning; when the core moves one, the old
path keeps working for a release with a DeprecationWarning naming the new one
(``minisgl_core.deprecated``). Importing this module is light (no torch, transformers, pytest or
network library): the contract suites, the tiny test model and the offline LLM resolve on first
use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from minisgl_core.config.launch import LaunchConfig
from minisgl_core.default_plugins.inproc import InprocTransport
from minisgl_core.engine_client import EngineClient, EngineOverloaded, EngineUnavailable
from minisgl_core.interfaces import (
    ROLE_KINDS,
    AddressInUse,
    ChannelClosed,
    Detokenizer,
    Frontend,
    MessageTooLarge,
    OptionsTable,
    Receiver,
    RoleKind,
    Scheduler,
    SchedulerStats,
    Sender,
    StepResult,
    Tokenizer,
    TokenizerCalls,
    Transport,
    TransportFactory,
)
from minisgl_core.plugin.hookspecs import (
    ProcessName,
    Register,
    RoleRegister,
    Target,
    hookimpl,
)
from minisgl_core.plugin.loading import build_manager, collect, loaded_module_names
from minisgl_core.plugin.model_lookup import (
    ModelNotFoundError,
    ResolvedModel,
    model_class,
    resolve,
    resolve_model,
)
from minisgl_core.plugin.options import check_port, checked_options
from minisgl_core.plugin.transport_tcp import (
    NetworkOptions,
    PortRange,
    RefusalLog,
    check_tcp_endpoint,
    keys_hint,
    note_plaintext,
    read_private,
    split_tcp,
    write_private,
)
from minisgl_core.plugin.transport_util import TransportOptions, check_size
from minisgl_core.rejection import RequestRejected
from minisgl_core.sampling import (
    MAX_LOGPROBS,
    PromptLogprobs,
    SamplingParams,
    StructuredKind,
    StructuredOutput,
    TokenLogprob,
)
from minisgl_core.service.roles import make_detokenizer, make_scheduler, make_tokenizer
from minisgl_core.service.rundir import (
    check_channel,
    claim_ipc_path,
    ipc_endpoint,
    ipc_path,
    private_run_dir,
    tcp_endpoint,
)
from minisgl_core.service.spec import RoleContext, WorkerSpec
from minisgl_core.store.paths import cache_dir
from minisgl_core.text.detokenize import DetokenizerRole
from minisgl_core.text.reasoning import syntax_of as reasoning_syntax
from minisgl_core.text.tokenize import TokenizerRole
from minisgl_core.text.tool_calls import ToolRequest, ToolRequestError, tool_request
from minisgl_core.text.tool_parser import Arguments, CallStart, Content, Event, ToolCallParser
from minisgl_core.text.tool_parser import collect as collect_tool_calls
from minisgl_core.version import __version__
from minisgl_core.wire.schema import (
    ChatMessage,
    DetokenizeCall,
    DetokenizeInfo,
    ErrorInfo,
    FinishReason,
    GenerateRequest,
    TextDelta,
    TextLogprob,
    TextPromptLogprobs,
    TokenBatch,
    TokenDelta,
    TokenizeCall,
    TokenizedRequest,
    TokenizerReply,
    ToolCall,
)

if TYPE_CHECKING:
    from minisgl_core.offline import LLM
    from minisgl_core.testing.contract_roles import DetokenizerContract, TokenizerContract
    from minisgl_core.testing.contract_scheduler import SchedulerContract
    from minisgl_core.testing.tiny import make_tiny_model
    from minisgl_core.testing.transport_contract import TcpTransportContract, TransportContract

# heavy names (torch, pytest): imported when first asked for
_LAZY = {
    "LLM": "minisgl_core.offline",
    "TransportContract": "minisgl_core.testing.transport_contract",
    "TcpTransportContract": "minisgl_core.testing.transport_contract",
    "TokenizerContract": "minisgl_core.testing.contract_roles",
    "DetokenizerContract": "minisgl_core.testing.contract_roles",
    "SchedulerContract": "minisgl_core.testing.contract_scheduler",
    "make_tiny_model": "minisgl_core.testing.tiny",
}

__all__ = [
    # writing a plugin: the marker, what the register hooks hand over, the config, options
    "ROLE_KINDS", "LaunchConfig", "ProcessName", "Register", "RoleKind", "RoleRegister",
    "Target", "__version__", "cache_dir", "check_port", "checked_options", "hookimpl",
    # the Protocols a plugin implements, and the transport errors
    "AddressInUse", "ChannelClosed", "Detokenizer", "Frontend", "MessageTooLarge",
    "OptionsTable", "Receiver", "Scheduler", "SchedulerStats", "Sender", "StepResult",
    "Tokenizer", "TokenizerCalls", "Transport", "TransportFactory",
    # the messages and the sampling types
    "MAX_LOGPROBS", "ChatMessage", "DetokenizeInfo", "ErrorInfo", "FinishReason",
    "GenerateRequest", "PromptLogprobs", "SamplingParams", "StructuredKind", "StructuredOutput",
    "TextDelta", "TextLogprob", "TextPromptLogprobs", "TokenBatch", "TokenDelta", "TokenLogprob",
    "TokenizedRequest", "ToolCall", "TokenizeCall", "DetokenizeCall", "TokenizerReply",
    # frontends: the engine, saying no, tool calls and how a reasoning parser marks thinking
    "Arguments", "CallStart", "Content", "EngineClient", "EngineOverloaded",
    "EngineUnavailable", "Event", "RequestRejected", "ToolCallParser", "ToolRequest",
    "ToolRequestError", "collect_tool_calls", "reasoning_syntax", "tool_request",
    # roles: what a factory gets, and the core's roles a plugin may wrap
    "DetokenizerRole", "RoleContext", "TokenizerRole", "WorkerSpec", "make_detokenizer",
    "make_scheduler", "make_tokenizer",
    # transports: helpers, and the core's transport a plugin may wrap
    "InprocTransport", "TransportOptions", "check_channel", "check_size", "claim_ipc_path",
    "ipc_endpoint", "ipc_path", "private_run_dir",
    # transports with tcp endpoints: their options, ports, the keys rule, key files, refusals
    "NetworkOptions", "PortRange", "RefusalLog", "check_tcp_endpoint", "keys_hint",
    "note_plaintext", "read_private", "split_tcp", "tcp_endpoint", "write_private",
    # the plugin manager and the models, from code
    "LLM", "ModelNotFoundError", "ResolvedModel", "build_manager", "collect",
    "loaded_module_names", "model_class", "resolve", "resolve_model",
    # testing a plugin: the contract suites and a tiny random model
    "DetokenizerContract", "SchedulerContract", "TcpTransportContract", "TokenizerContract",
    "TransportContract",
    "make_tiny_model",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'minisgl_core.api' has no attribute {name!r}")
