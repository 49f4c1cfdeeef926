"""felab: the shared plumbing of the lab kit, so that lesson scripts stay short.

A lesson script imports what it needs from here:

    from felab import add_target_args, banner, client, percentile, record, resolve, run, stream_once, table

The learner's library is the modules at this level. The practice server
(felab/mock_server/), the course tooling (felab/course/), the Fireworks billing
check (felab/fireworks/) and the tiny model for real engines (felab/tiny_model/)
are packages of their own. Names are loaded on first use (PEP 562), so
starting the practice server does not import the openai SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOME = {
    "FelabError": "errors",
    "run": "errors",
    "table": "tables",
    "read_records": "results",
    "record": "results",
    "percentile": "stats",
    "ratio": "stats",
    "CallResult": "streaming",
    "Usage": "streaming",
    "stream_once": "streaming",
    "usage_once": "streaming",
    "TARGETS": "targets",
    "Target": "targets",
    "add_target_args": "targets",
    "lesson_parser": "targets",
    "positive_int": "targets",
    "banner": "connect",
    "client": "connect",
    "resolve": "connect",
}

__all__ = [
    "CallResult",
    "FelabError",
    "TARGETS",
    "Target",
    "Usage",
    "add_target_args",
    "banner",
    "client",
    "lesson_parser",
    "percentile",
    "positive_int",
    "ratio",
    "read_records",
    "record",
    "resolve",
    "run",
    "stream_once",
    "table",
    "usage_once",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'felab' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"felab.{_HOME[name]}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from felab.connect import banner, client, resolve
    from felab.errors import FelabError, run
    from felab.results import read_records, record
    from felab.stats import percentile, ratio
    from felab.streaming import CallResult, Usage, stream_once, usage_once
    from felab.tables import table
    from felab.targets import TARGETS, Target, add_target_args, lesson_parser, positive_int
