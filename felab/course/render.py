"""Rendering the assembled pages into the site: MkDocs with the Material theme, warnings as errors.

`render(root, staging, nav, site)` runs MkDocs on the kit's `mkdocs.yml` with the
staging folder (assemble.py's output) as `docs_dir` and `strict: true`: any warning
stops the build, so a broken link, a missing anchor or a missing included file fails
it (`pymdownx.snippets` with `check_paths: true` resolves each code listing against
the lesson's real file). The site needs nothing from the network.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from felab.errors import FelabError
from felab.paths import from_here


class _Collect(logging.Handler):
    """Keeps MkDocs' warnings so the error can list them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def render(root: Path, staging: Path, nav: list[Any], site: Path) -> Path:
    """Build `staging` into `site` with `root`'s mkdocs.yml and this navigation; return `site`."""
    try:
        from mkdocs.commands.build import build as mkdocs_build
        from mkdocs.config import load_config
        from mkdocs.exceptions import Abort, MkDocsException
    except ImportError as exc:
        raise FelabError(
            f"building the course pages needs MkDocs ({exc.name} is missing): run "
            f"`{from_here('make bundle')}`, which installs the kit's course extra into .venv once."
        ) from None
    collect = _Collect()
    logger = logging.getLogger("mkdocs")
    logger.addHandler(collect)
    try:
        config = load_config(
            str(root / "mkdocs.yml"), docs_dir=str(staging), site_dir=str(site), nav=nav, strict=True
        )
        mkdocs_build(config)
    except (Abort, MkDocsException, OSError) as exc:
        said = "\n".join(f"  - {m}" for m in collect.messages) or f"  - {exc}"
        raise FelabError(f"the course pages did not build ({exc}):\n{said}") from None
    except Exception as exc:  # a Markdown extension's own error, e.g. a snippet file that is missing
        raise FelabError(f"the course pages did not build: {type(exc).__name__}: {exc}") from None
    finally:
        logger.removeHandler(collect)
    return site
