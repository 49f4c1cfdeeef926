"""The OpenAI wire format, as the practice server speaks it: requests and errors.

Requests are Pydantic models with bounded fields, so a bad value becomes a 400
naming the field (`param`), never a 500. Every error, whatever its status, goes
out in OpenAI's envelope:

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

# ── Requests ──────────────────────────────────────────────────────────────────


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The fields the practice server reads; other OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    max_tokens: StrictInt | None = Field(None, ge=1, le=131_072)
    max_completion_tokens: StrictInt | None = Field(None, ge=1, le=131_072)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: str | None = None


def chat_template(messages: list[Message]) -> str:
    """A plain chat template: each message as `<|role|>` and its text, then the reply's opening."""
    return "".join(f"<|{m.role}|>\n{m.text()}\n" for m in messages) + "<|assistant|>\n"


# ── Errors in OpenAI's shape ─────────────────────────────────────────────────


@dataclass
class ApiError(Exception):
    """An error to answer with: its HTTP status, the envelope's fields, and any headers."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] | None = None

    def response(self) -> JSONResponse:
        """The error as OpenAI sends it: `{"error": {"message", "type", "param", "code"}}`."""
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    first = exc.errors()[0] if exc.errors() else {}
    if first.get("type") == "json_invalid":
        return "The request body is not valid JSON.", None
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    return f"Invalid value for '{param or 'body'}': {first.get('msg', 'invalid request')}.", param
