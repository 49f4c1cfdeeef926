"""felab: the shared plumbing of the lab kit, so that lesson scripts stay short.

A lesson script imports what it needs from here:

    from felab import add_target_args, banner, client, percentile, record, resolve, run, stream_once, table
"""

from felab.errors import FelabError, run
from felab.report import table
from felab.results import read_records, record
from felab.stats import percentile, ratio
from felab.streaming import CallResult, Usage, stream_once, usage_once
from felab.targets import TARGETS, Target, add_target_args, banner, client, lesson_parser, resolve

__all__ = [
    "TARGETS",
    "CallResult",
    "FelabError",
    "Target",
    "Usage",
    "add_target_args",
    "banner",
    "client",
    "lesson_parser",
    "percentile",
    "ratio",
    "read_records",
    "record",
    "resolve",
    "run",
    "stream_once",
    "table",
    "usage_once",
]
