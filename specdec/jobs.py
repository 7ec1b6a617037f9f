"""Console scripts (pyproject's [project.scripts]): the Hydra jobs `specdec-train`, `specdec-eval`, the trio build
`specdec-build-models`, and `specdec-decode`, the engine's own CLI (specdec/__main__.py).

The jobs are scripts, not library code: in this repository they are train/run.py, eval/run.py and
data/build_models.py beside conf/; an installed copy (pip install .) keeps the same layout under the one
namespace specdec_jobs/ in site-packages (no top-level `data`, `train` or `eval` package). Each script is run
from that tree exactly as `python train/run.py ...` runs it here: its folder's parent is put first on sys.path for
that process and Hydra finds `../conf` beside the script. Nothing here imports a job module by name, so the
engine keeps no import edge to eval/train/data.

    specdec-train task=gsm8k lambda=0.1        == python train/run.py task=gsm8k lambda=0.1
    specdec-eval method=sd task=gsm8k          == python eval/run.py method=sd task=gsm8k
    specdec-build-models --out DIR             == python data/build_models.py --out DIR
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from pathlib import Path

SCRIPTS = {"train": "train/run.py", "eval": "eval/run.py", "build_models": "data/build_models.py"}


def job_root() -> Path:
    """The folder that holds train/, eval/, data/ and conf/: this repository when specdec is imported from it (a
    checkout, or an editable install), else the installed specdec_jobs/ namespace."""
    here = Path(__file__).resolve().parents[1]
    if all((here / rel).is_file() for rel in SCRIPTS.values()) and (here / "conf").is_dir():
        return here
    spec = importlib.util.find_spec("specdec_jobs")
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        root = Path(loc)
        if all((root / rel).is_file() for rel in SCRIPTS.values()) and (root / "conf").is_dir():
            return root
    raise SystemExit("specdec: the job scripts (train/run.py, eval/run.py, data/build_models.py and conf/) are "
                     "neither beside the specdec package nor installed under specdec_jobs/: reinstall the package")


def is_checkout() -> bool:
    """Whether specdec runs from this repository (a checkout or an editable install) rather than an installed copy."""
    return (Path(__file__).resolve().parents[1] / "pyproject.toml").is_file()


def installed_defaults() -> None:
    """An installed copy keeps nothing it writes inside site-packages: unless $SPECDEC_MODELS_DIR says otherwise,
    the embedded trio lives in the user's cache ($XDG_CACHE_HOME or ~/.cache, /specdec/models/tiny), built there on
    first use. Hydra's run directories go under the working directory, as from a checkout."""
    if not is_checkout():
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdec"
        os.environ.setdefault("SPECDEC_MODELS_DIR", str(cache / "models" / "tiny"))


def run_script(job: str, argv: list[str] | None = None) -> None:
    """Run one job's script file as __main__ with `argv` (default: this process's arguments), as `python
    <script>` would: Hydra resolves config_path="../conf" from the script's location, and no job module is run
    or imported by name (the script's own imports find the job tree, first on sys.path)."""
    root = job_root()
    installed_defaults()
    script = root / SCRIPTS[job]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    sys.argv = [str(script), *(sys.argv[1:] if argv is None else argv)]
    runpy.run_path(str(script), run_name="__main__")


def decode() -> None:
    """The engine's CLI (specdec/__main__.py), with an installed copy's defaults."""
    installed_defaults()
    from specdec.__main__ import main

    main()


def train() -> None:
    run_script("train")


def evaluate() -> None:
    run_script("eval")


def build_models() -> None:
    run_script("build_models")
