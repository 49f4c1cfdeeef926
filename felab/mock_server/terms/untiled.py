"""Rows read one at a time: a ubatch with fewer rows of a prompt than a tile.

llama.cpp computes a step's batch in ubatches of at most ubatch_tokens (its -ub, 512). On a CPU
its flash attention takes a sequence's rows of one ubatch in tiles of tile_tokens (64,
GGML_FA_TILE_Q); fewer rows are read row by row, each a pass over the context (ggml-cpu/ops.cpp,
`use_tiled`). Measured on llama-server (the kit's tiny model, one thread): 53 new tokens after
2,504 cached took 85 ms, 73 took 13 ms.

Which rows share a ubatch is llama.cpp's split of the batch (llama-batch.cpp). A prompt alone
is cut in order, so only its last ubatch can be short: rows = new mod ubatch. With several seats
(`-np N`: a KV cache per seat) llama.cpp splits a batch evenly (`split_equal`, sequential ids):
a ubatch takes seats whose numbers follow on (2, 3, ...), the same rows of each, as many as the
one with fewest left has, and at most ubatch / seats of them. The batch holds first a token of
each stream writing its reply, then the prompts' pieces, each in seat order. So a 17-token
question in seat 2 beside a 664-token piece in seat 3 makes a ubatch of 17 rows of each: both
are read row by row, though the longer piece alone would be cut 512 + 152.
"""

from collections.abc import Iterator

from felab.mock_server.step import Piece, Step
from felab.mock_server.terms.term import Rates, Term


def rows(piece: Piece, rates: Rates) -> int:
    """The rows of a lone piece's last ubatch when fewer than a tile, else 0."""
    u = rates.ubatch_tokens
    left = piece.new % u if u else piece.new
    return left if 0 < left < rates.tile_tokens else 0


def split(seqs: list[int | None], tokens: list[int], ubatch: int | None) -> Iterator[list[tuple[int, int]]]:
    """llama.cpp's ubatches of a batch: entry i is `tokens[i]` tokens of sequence `seqs[i]` (None:
    one that shares no ubatch), in batch order. Each ubatch as (entry, rows) pairs."""
    left = list(tokens)
    while (first := next((i for i, n in enumerate(left) if n > 0), None)) is not None:
        chosen = _following(seqs, left, first)
        rows = min(left[i] for i in chosen)
        if ubatch:
            rows = min(rows, max(ubatch // len(chosen), 1))
        yield [(i, rows) for i in chosen]
        for i in chosen:
            left[i] -= rows


def _following(seqs: list[int | None], left: list[int], first: int) -> list[int]:
    """The entries a ubatch starting at entry `first` takes: it, then each later entry with tokens
    left whose sequence is the one after the last taken (none after a sequence of None)."""
    chosen, last = [first], seqs[first]
    for i in range(first + 1, len(left)):
        if left[i] > 0 and last is not None and seqs[i] == last + 1:
            chosen.append(i)
            last = seqs[i]
    return chosen


def untiled(step: Step, rates: Rates) -> float:
    """Σ over the ubatches of each prompt's rows read one at a time: rows · (the context they end at)."""
    if not rates.tile_tokens:
        return 0.0
    streams = len(step.decodes)
    seqs = [*(step.decode_seqs or (None,) * streams), *(p.seq for p in step.pieces)]
    tokens = [*(1,) * streams, *(p.new for p in step.pieces)]
    read, total = [0] * len(step.pieces), 0.0
    for ubatch in split(seqs, tokens, rates.ubatch_tokens):
        for i, rows in ubatch:
            if (k := i - streams) < 0:
                continue  # (a reply token: the decode terms price it)
            read[k] += rows
            if rows < rates.tile_tokens:
                total += rows * (step.pieces[k].context + read[k])
    return total


TERM = Term(
    name="untiled",
    settings=("untiled_ns", "ubatch_tokens", "tile_tokens"),
    basis=untiled,
    coefficient=lambda rates: rates.untiled_ns * 1e-9,
    values=lambda c: {"untiled_ns": c["untiled"] * 1e9},
    probe="rows",
    meaning="a prompt's rows in a ubatch of fewer than a tile are read row by row",
    formula="untiled_ns · Σ rows · context   (a ubatch's rows of a prompt, when < tile)",
)
