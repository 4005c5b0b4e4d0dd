"""The results the adapter answers with itself (the tool body does not run for them). The
defaults are the Rust example server's texts and structured content; change the texts
with the constructor's arguments, or subclass and override a method for other content.

The texts name the provider by its display name (`{provider_name}`, e.g. "GitHub") where
mcp-connect said it, else by its id (`{provider}`, e.g. `github`), which a template may
use too; the structured content's `provider` is always the id."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._lazy import mcp_missing

try:
    from mcp_types import CallToolResult, TextContent
except ModuleNotFoundError as e:
    mcp_missing("Replies (mcp_connect.replies)", e)

__all__ = ["Replies"]


def _result(text: str, structured: dict[str, Any] | None = None, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured, is_error=error)


@dataclass(frozen=True)
class Replies:
    """The texts are `str.format` templates: `not_connected_text` and `setup_link_text` get
    `{provider}` (the id) and `{provider_name}` (the display name, or the id when nothing
    said it), `setup_link_text` also `{url}`; `failed_text` gets `{provider}` and `{code}`;
    `unknown_provider_text` `{provider}` and `{provider_json}`.

    `not_connected` and `setup_link` take `provider_name` as a keyword argument with a
    default (None: not known). A subclass written before it, overriding them with the
    provider id alone, keeps working: the adapter passes `provider_name` only to a method
    that takes it."""

    # Declined or cancelled (on the page or in the client): a normal result, no new prompt.
    not_connected_text: str = "Not connected to {provider_name}: nothing was shared."
    # The client has no URL elicitation: the link to open outside the MCP workflow.
    setup_link_text: str = (
        "Not connected to {provider_name}. This client cannot open a connect page by itself: "
        "open {url} in your browser to connect the account, then ask again."
    )
    # mcp-connect could not answer: its stable code, nothing secret.
    failed_text: str = "The connection service could not answer ({code}); try again later."
    # A provider name outside the tool's allow-list (`providers=`).
    unknown_provider_text: str = "This server does not know the provider {provider_json}."

    def not_connected(self, provider: str, *, provider_name: str | None = None) -> CallToolResult:
        text = self.not_connected_text.format(provider=provider, provider_name=provider_name or provider)
        return _result(text, {"connected": False, "provider": provider, "setup_url": None})

    def setup_link(self, provider: str, url: str, *, provider_name: str | None = None) -> CallToolResult:
        text = self.setup_link_text.format(provider=provider, provider_name=provider_name or provider, url=url)
        return _result(text, {"connected": False, "provider": provider, "setup_url": url})

    def failed(self, provider: str, code: str) -> CallToolResult:
        return _result(self.failed_text.format(provider=provider, code=code), error=True)

    def unknown_provider(self, provider: str) -> CallToolResult:
        text = self.unknown_provider_text.format(provider=provider, provider_json=json.dumps(provider))
        return _result(text, error=True)
