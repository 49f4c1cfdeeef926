"""The course bundle: the lesson pages as an offline site, built with MkDocs and Material.

`make bundle` runs `build()`, in two steps, each a module of its own:

    assemble.py   page sources -> build/bundle-src/   markers filled, your numbers from results/
    render.py     build/bundle-src/ -> build/bundle/   MkDocs, warnings as errors

and `make bundle-serve` serves the site on 127.0.0.1:8770 (serve.py). Page sources:
`lessons/NN-slug/page.md`, `course/index.md`, `course/days/day-NN.md`; a lesson's
numbers are declared beside its page, in `lessons/NN-slug/numbers.toml` (numbers.py).
See docs/bundle.md.
"""

from __future__ import annotations

from pathlib import Path

from felab.paths import KIT_ROOT

STAGING = Path("build") / "bundle-src"
SITE = Path("build") / "bundle"


def build(root: Path = KIT_ROOT, site: Path | None = None, staging: Path | None = None) -> Path:
    """Assemble and render the bundle with warnings as errors; return the site folder.

    `site` and `staging` default to `build/bundle/` and `build/bundle-src/` under `root`.
    """
    from felab.course.assemble import assemble  # PyYAML and MkDocs: the course extra
    from felab.course.render import render

    staging = staging or root / STAGING
    nav = assemble(root, staging)
    return render(root, staging, nav, site or root / SITE)
