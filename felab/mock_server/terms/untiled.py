"""A last piece of few rows: read one token at a time, each a pass over the whole context.

llama.cpp computes a prompt in ubatches of ubatch_tokens (its -ub, 512); the last holds the
rest, rows = new mod ubatch. On a CPU its flash attention takes a ubatch's rows in tiles of
tile_tokens (64, GGML_FA_TILE_Q); a ubatch of fewer rows is read row by row, each row a pass
over the context (ggml-cpu/ops.cpp, `use_tiled`). So a prompt 30 tokens past a multiple of 512
costs 30 passes more than one 100 tokens past it. Measured on llama-server (the kit's tiny
model, one thread): 53 new tokens after 2,504 cached took 85 ms, 73 took 13 ms.
"""

from felab.mock_server.step import Piece
from felab.mock_server.terms.term import Rates, Term


def rows(piece: Piece, rates: Rates) -> int:
    """The rows of the piece's last ubatch when fewer than a tile, else 0."""
    u = rates.ubatch_tokens
    left = piece.new % u if u else piece.new
    return left if 0 < left < rates.tile_tokens else 0


TERM = Term(
    name="untiled",
    settings=("untiled_ns", "ubatch_tokens", "tile_tokens"),
    basis=lambda step, rates: float(sum(rows(p, rates) * (p.context + p.new) for p in step.pieces)),
    coefficient=lambda rates: rates.untiled_ns * 1e-9,
    values=lambda c: {"untiled_ns": c["untiled"] * 1e9},
    probe="rows",
    meaning="a last piece of fewer rows than a tile is read row by row",
    formula="untiled_ns · rows · (context + new)   (rows = new mod ubatch, when < tile)",
)
