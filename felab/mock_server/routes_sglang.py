"""`--route sglang-cache-aware`: SGLang's router's cache-aware policy, as its source states it.

sglang-router (sgl-project/sglang, `sgl-model-gateway/src/policies/cache_aware.rs` and
`tree.rs`) keeps one approximate radix tree of the request texts it has routed, each node
knowing which workers ("tenants") were sent a text through it and when. For each request:

    loads      each worker's requests in flight at the router
    imbalanced (max - min) > balance_abs_threshold  and  max > min * balance_rel_threshold
               (defaults 64 and 1.5): the least loaded worker, the first of those tied
    otherwise  the longest prefix of the text the tree holds: if it is more than
               cache_threshold (0.3) of the text, the tenant of the node where the match ends
               that was sent a text through it last; else the least loaded worker, the first
               of those tied (sglang-router 0.3.2: measured here, 8 cold prompts in a row all
               to one worker; older releases took the worker with the smallest tree)
    then       the text is inserted for the chosen worker (in both cases)

The router's tree holds characters; the model holds the prompt's blocks (cache.py's chained
keys, what a replayed trace has). A chained key stands for its whole prefix, so the tree is a
map from key to {worker: when}, and a match is the run of leading keys it holds. Two
differences follow, both small on lesson-shaped work: a match counts whole blocks (a prompt
shorter than one block is always cold here), and the match rate is blocks over the prompt's
tokens. The tree's eviction (by size, each minute) is left out: its default limit (67 million
characters per worker) is far beyond a lesson's or a replay slice's text.

Ties are where the real router is not deterministic: "the first of those tied" is the first in
its worker list, whose order is its registry's, not the order of `--worker-urls`. The model
takes replica 0; `felab fleet check` therefore compares the two after matching each replica to
the worker it most often agrees with (docs/fleet.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SglangSettings:
    """The policy's knobs, with sglang-router 0.3.2's defaults (`sglang-router launch --help`)."""

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5


@dataclass
class CacheAware:
    """The policy's state: the tree (block key -> {replica: last time a prompt went through it})."""

    settings: SglangSettings = field(default_factory=SglangSettings)
    tree: dict[int, dict[int, int]] = field(default_factory=dict)
    epoch: itertools.count = field(default_factory=itertools.count)

    def choose(self, keys: Sequence[int], prompt_tokens: int, block_tokens: int, loads: Sequence[int]) -> int:
        """The replica for a prompt of `prompt_tokens` with these block keys (of `block_tokens`
        each), given each replica's requests in flight; the prompt is then inserted for it."""
        s = self.settings
        low, high = min(loads), max(loads)
        least = loads.index(low)  # the first of the least loaded
        if high - low > s.balance_abs_threshold and high > low * s.balance_rel_threshold:
            chosen = least
        else:
            matched, tenant = self.prefix_match(keys)
            rate = matched * block_tokens / prompt_tokens if prompt_tokens else 0.0
            chosen = tenant if tenant is not None and rate > s.cache_threshold else least
        self.insert(keys, chosen)
        return chosen

    def prefix_match(self, keys: Sequence[int]) -> tuple[int, int | None]:
        """(blocks matched, the replica that went through the last matched node most recently)."""
        matched = 0
        for key in keys:
            if key not in self.tree:
                break
            matched += 1
        if not matched:
            return 0, None
        tenants = self.tree[keys[matched - 1]]
        return matched, max(tenants, key=tenants.__getitem__)

    def insert(self, keys: Sequence[int], replica: int) -> None:
        """The prompt's path, now also the replica's, stamped now."""
        now = next(self.epoch)
        for key in keys:
            self.tree.setdefault(key, {})[replica] = now
