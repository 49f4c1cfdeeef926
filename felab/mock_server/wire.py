"""The OpenAI wire format, as the practice server reads it: request bodies and errors.

Requests are Pydantic models whose fields carry OpenAI's documented types and
ranges (temperature 0 to 2, top_p 0 to 1, n at least 1, penalties -2 to 2, stop
a string or up to 4 strings, ...), so a bad value becomes a 400 naming the field
(`param`), never a 500 and never a silent 200. Numbers and booleans are strict:
`"temperature": "0.5"` is a string, and refused, as OpenAI refuses it.

A valid value the practice server cannot honour (`n` above 1, log probabilities,
`echo`, ...) is a 400 too, `code: unsupported_value`: see `Sampling.refusals()`.
Sampling knobs (temperature, top_p, seed, penalties, logit_bias) are checked and
then have nothing to act on: the reply is placeholder words, not sampled.

Every error, whatever its status, goes out in OpenAI's envelope:

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator
from starlette.responses import JSONResponse

# ── Requests ──────────────────────────────────────────────────────────────────


# JSON numbers (an integer or a decimal; not a string, not a boolean) in OpenAI's ranges.
Temperature = Annotated[float, Field(strict=True, ge=0.0, le=2.0)]
Share = Annotated[float, Field(strict=True, ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(strict=True, ge=-2.0, le=2.0)]
Bias = Annotated[float, Field(strict=True, ge=-100.0, le=100.0)]


def text_or_texts(value: Any, field: str, most: int | None = None) -> Any:
    """Check a field that is a string or a list of strings (at most `most`), with one clear message."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field} must be a string or a list of strings")
    if most is not None and len(value) > most:
        raise ValueError(f"{field} takes at most {most} strings, got {len(value)}")
    return value


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: list[TextPart] | str | None = None  # the list first: its errors name the part at fault

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: Any) -> Any:
        if value is None or isinstance(value, (str, list)):
            return value
        raise ValueError("content must be a string, a list of text parts, or null")

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool = False
    """OpenAI's: one more chunk before [DONE] carries the usage; every chunk before it `"usage": null`."""
    continuous_usage_stats: StrictBool = False
    """vLLM's: with include_usage, every chunk carries the usage so far (guidellm asks for it)."""


class Sampling(BaseModel):
    """What chat and legacy completions share: the model, the reply's length, streaming, sampling."""

    model_config = ConfigDict(extra="allow")  # other fields (vLLM's ignore_eos, tools, ...) are accepted
    prompt_field: ClassVar[str] = "prompt"
    """The field a prompt too long for the context is blamed on."""

    model: str = Field(min_length=1)
    max_tokens: StrictInt | None = Field(None, ge=1)  # the upper bound is the server's context
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    temperature: Temperature | None = None
    top_p: Share | None = None
    n: StrictInt | None = Field(None, ge=1, le=128)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: StrictInt | None = None
    logit_bias: dict[str, Bias] | None = None
    stop: str | list[str] | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        return None if value is None else text_or_texts(value, "stop", most=4)

    def reply_limit(self) -> int | None:
        """The reply's length the request asks for, if any."""
        return self.max_tokens

    def stops(self) -> list[str]:
        """The stop strings, as a list (empty strings match nothing and are dropped)."""
        found = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return [s for s in found if s]

    def refusals(self) -> Iterator[ApiError]:
        """A 400 for each field valid alone but wrong with another, or a value this server cannot honour."""
        if self.stream_options is not None and not self.stream:
            yield invalid("stream_options", "stream_options is only allowed when stream is true")
        if self.n is not None and self.n > 1:
            yield unsupported(
                "n", "n above 1 is not supported: the practice server writes one choice per request"
            )


class ChatRequest(Sampling):
    """`POST /v1/chat/completions`."""

    prompt_field: ClassVar[str] = "messages"

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)

    def reply_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def prompt_text(self) -> str:
        return chat_template(self.messages)

    def refusals(self) -> Iterator[ApiError]:
        yield from super().refusals()
        if self.logprobs:
            yield unsupported("logprobs", NO_LOGPROBS)
        if self.top_logprobs:
            yield unsupported("top_logprobs", NO_LOGPROBS)


class CompletionRequest(Sampling):
    """`POST /v1/completions` (legacy completions: a prompt in, text out, no chat template).

    `prompt` is a string, or a list of one string. OpenAI reads a longer list as a
    batch (one choice per prompt); the practice server answers one prompt per
    request, so a longer list is a 400. vLLM's `vllm bench serve` and guidellm
    both send a single string.
    """

    prompt: str | list[str]
    logprobs: StrictInt | None = Field(None, ge=0, le=5)
    echo: StrictBool | None = None
    best_of: StrictInt | None = Field(None, ge=1, le=20)
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            raise ValueError("token ids are not supported by the practice server: send the prompt as text")
        value = text_or_texts(value, "prompt")
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be an empty list")
        return value

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else "".join(self.prompt)

    def refusals(self) -> Iterator[ApiError]:
        yield from super().refusals()
        if isinstance(self.prompt, list) and len(self.prompt) > 1:
            batch = f"a batch of {len(self.prompt)} prompts is not supported: the practice server answers"
            yield unsupported("prompt", f"{batch} one prompt per request (send a string, or a list of one)")
        if self.best_of is not None and self.best_of > 1:
            yield unsupported(
                "best_of", "best_of above 1 is not supported: the practice server writes one choice"
            )
        if self.logprobs is not None:
            yield unsupported("logprobs", NO_LOGPROBS)
        if self.echo:
            yield unsupported("echo", "echo is not supported by the practice server")
        if self.suffix:
            yield unsupported("suffix", "suffix is not supported by the practice server (nor by vLLM)")


def chat_template(messages: list[Message]) -> str:
    """A plain chat template: each message as `<|role|>` and its text, then the reply's opening."""
    return "".join(f"<|{m.role}|>\n{m.text()}\n" for m in messages) + "<|assistant|>\n"


Body = TypeVar("Body", bound=Sampling)


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


def invalid(param: str, why: str) -> ApiError:
    return ApiError(400, f"Invalid value for '{param}': {why}.", param=param)


def unsupported(param: str, why: str) -> ApiError:
    """A valid value the practice server cannot honour: refused, not silently ignored."""
    return ApiError(400, f"Unsupported value for '{param}': {why}.", param=param, code="unsupported_value")


NO_LOGPROBS = "log probabilities are not supported: the practice server has no model"


def refuse(req: Sampling) -> None:
    """Raise the request's first refusal (see `Sampling.refusals()`), if it has one."""
    for error in req.refusals():
        raise error


CODES = {
    "greater_than_equal": "below_min_value",
    "greater_than": "below_min_value",
    "less_than_equal": "above_max_value",
    "less_than": "above_max_value",
    "too_long": "array_above_max_length",
    "too_short": "empty_array",
    "missing": "missing_required_parameter",
}
"""Pydantic's error type -> the code OpenAI gives (a range code starts `integer_` or `decimal_`)."""

UNION_TAG = re.compile(r"[A-Z\[]|^(str|int|float|bool|none)$")
"""How Pydantic names a member of a union in an error's location (`str`, `list[TextPart]`)."""


def error_code(error: dict[str, Any]) -> str | None:
    """OpenAI's `code` for a Pydantic error: `decimal_above_max_value`, `invalid_type`, ..."""
    kind = error.get("type", "")
    code = CODES.get(kind)
    if code and code.endswith("_value"):
        bound = next(iter(error.get("ctx", {}).values()), 0)
        return ("decimal_" if isinstance(bound, float) else "integer_") + code
    if code is None and kind.endswith("_type"):
        return "invalid_type"
    return code


def parse(model: type[Body], body: bytes) -> Body:
    """Read a request body as `model` (ChatRequest, CompletionRequest); if it is not one, a 400."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def validation_error(exc: ValidationError) -> ApiError:
    """The first problem Pydantic found, as a 400 naming the field (`messages.0.role`, `temperature`)."""
    errors = exc.errors()
    first: dict[str, Any] = dict(errors[0]) if errors else {}
    if first.get("type") == "json_invalid":
        return ApiError(400, "The request body is not valid JSON.")
    loc = [str(p) for p in first.get("loc", ()) if not UNION_TAG.search(str(p))]
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    return ApiError(
        400, f"Invalid value for '{param or 'body'}': {msg}.", param=param, code=error_code(first)
    )
