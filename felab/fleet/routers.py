"""The real routers a fleet can put in front of its workers, each installed by the `routers` extra.

Both are Rust binaries on PyPI (no GPU, no model), installed into the kit's environment:

    sglang-router 0.3.2   sglang-router launch --host H --port P --worker-urls URL ... --policy NAME
    vllm-router 0.1.17    vllm-router --host H --port P --worker-urls URL ... --policy NAME

Each also serves Prometheus metrics of its own, on port 29000 unless told otherwise: a second
router (or another learner's) would find it taken, so each fleet names a port of its own range.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from felab.errors import FelabError
from felab.paths import from_here


@dataclass(frozen=True)
class Router:
    """One router: its PyPI package, its binary, the words before its flags, and its policies."""

    name: str
    package: str
    binary: str
    subcommand: tuple[str, ...]
    policies: tuple[str, ...]
    default_policy: str = "cache_aware"

    def path(self) -> Path:
        """The binary beside this Python (the kit's .venv/bin), where pip installs it."""
        return Path(sys.executable).parent / self.binary

    def command(self, port: int, metrics_port: int, workers: list[str], policy: str) -> list[str]:
        """The router's command line: loopback only, these workers, this policy."""
        return [
            str(self.path()),
            *self.subcommand,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--prometheus-port",
            str(metrics_port),
            "--worker-urls",
            *workers,
            "--policy",
            policy,
        ]

    def installed(self) -> Path:
        """The binary, or a FelabError that says how to install it."""
        path = self.path()
        if not path.exists():
            raise FelabError(
                f"the router `{self.binary}` is not installed in this Python ({path} is missing). "
                f"`make fleet` installs it (the kit's `routers` extra, from PyPI, once); by hand: "
                f"`{from_here('.venv/bin/pip')} install {self.package}`. Without network, "
                f"`make fleet ROUTER=none` runs the kit's own in-process fleet, which needs nothing more."
            )
        return path


ROUTERS: dict[str, Router] = {
    "sglang": Router(
        "sglang",
        "sglang-router",
        "sglang-router",
        ("launch",),
        ("cache_aware", "round_robin", "random", "power_of_two"),
    ),
    "vllm": Router(
        "vllm",
        "vllm-router",
        "vllm-router",
        (),
        ("cache_aware", "round_robin", "random", "power_of_two", "consistent_hash"),
    ),
}
"""By the name `ROUTER=` takes. `none` (the kit's own fleet in one process) is not a router."""
