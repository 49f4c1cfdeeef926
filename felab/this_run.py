"""What this process has recorded so far: the one list `results.record()` adds to and `errors.run()`
reports from when a run stops early ("this run recorded 2 rows before it stopped, kept in ...").

It imports nothing of the kit, so both can import it at the top: errors.py no longer reaches up
into results.py (which imports errors.py) from inside a function to share it.
"""

from __future__ import annotations

from pathlib import Path

RECORDED: list[Path] = []
"""The file of every row this process recorded, in order: what a stopped run can truthfully report."""
