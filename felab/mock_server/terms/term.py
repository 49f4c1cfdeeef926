"""What a cost term is (`Term`), and the settings it may read (`Rates`): the registry's vocabulary.

A module of its own so that each term's file imports it without importing the registry that
lists the terms (felab/mock_server/terms/__init__.py): no import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from felab.mock_server.step import Step


class Rates(Protocol):
    """The settings the terms read (TimingModel has them all); read-only, as a frozen
    dataclass's fields are."""

    @property
    def prefill_tokens_per_s(self) -> float: ...
    @property
    def decode_tokens_per_s(self) -> float: ...
    @property
    def attention_ns(self) -> float: ...
    @property
    def masked_attention_ns(self) -> float: ...
    @property
    def decode_slowdown(self) -> float: ...
    @property
    def cached_token_us(self) -> float: ...
    @property
    def decode_context_ns(self) -> float: ...
    @property
    def ubatch_tokens(self) -> int | None: ...
    @property
    def tile_tokens(self) -> int: ...
    @property
    def untiled_ns(self) -> float: ...
    @property
    def batch_slowdown(self) -> float: ...


@dataclass(frozen=True)
class Term:
    """One cost term: coefficient(settings) × basis(step) seconds, in every step."""

    name: str
    settings: tuple[str, ...]
    """The settings (Settings fields, profile keys) that give its coefficient."""
    basis: Callable[[Step, Rates], float]
    """Its basis function: what in a step it is proportional to (it may read structural
    settings, such as the ubatch size, from the rates)."""
    coefficient: Callable[[Rates], float]
    """Seconds per unit of its basis, from the settings."""
    values: Callable[[Mapping[str, float]], dict[str, Any]]
    """The inverse: its settings' values from the fitted coefficients (all of them, by term
    name: a term may scale another's, as the slowdowns scale the rates)."""
    probe: str
    """The calibrate probe whose timings expose it."""
    meaning: str
    """One line for the docs and --help-twin."""
    formula: str
    """Its part of the step's time, as the docs print it."""
    streams_only: bool = False
    """Whether its basis reads nothing but the streams decoding (`Step.decodes`): then it is the
    same in every step of a run that holds the same streams, and the pricer works it out once
    for them (terms/__init__.py, `pricer`)."""
