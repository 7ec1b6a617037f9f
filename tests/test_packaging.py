"""A non-editable install (wheel -> fresh venv): what lands in site-packages, and every console script's --help.

The wheel is built from a copy of the packaged folders (nothing is written into the checkout) with the project's
own setuptools, offline (--no-build-isolation --no-index). The fresh venv sees the project venv's dependencies
(torch, transformers, hydra, ...) through a .pth line, so nothing is downloaded; the package itself comes only
from the wheel, and the scripts run from a directory outside the checkout. ~40 s on 2 busy cores.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("specdec-decode", "specdec-train", "specdec-eval", "specdec-build-models")
GENERIC = {"data", "eval", "train", "bench", "diagnostics", "rewards", "conf", "tests", "artifacts"}
TOOLING = {"pip", "setuptools", "pkg_resources", "_distutils_hack", "__pycache__"}


def _run(cmd: list, cwd: Path, timeout: int = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.mark.slow
def test_a_wheel_installs_no_generic_top_level_package_and_every_console_script_runs(tmp_path):
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed in this venv: cannot build the wheel offline")
    tomllib = pytest.importorskip("tomllib", reason="Python < 3.11 has no tomllib to read pyproject.toml")
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    st = cfg["tool"]["setuptools"]
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    folders = {p for p in st["packages"] if "." not in p} | set(st["package-dir"].values())
    for folder in sorted(folders):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "-w", tmp_path / "dist", "."], cwd=src, env=env)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "BuildBackendWarning" not in built.stderr, built.stderr[-3000:]  # e.g. a conf group left out
    (wheel,) = (tmp_path / "dist").glob("specdec-*.whl")

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", venv], cwd=tmp_path, env=env)
    if made.returncode != 0:
        pytest.skip(f"cannot create a venv with pip here (ensurepip): {made.stderr.strip()[-300:]}")
    py = venv / "bin" / "python"
    purelib = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path,
                        env=env).stdout.strip())
    # the project's dependencies, not the project: directories named in a .pth get no .pth processing of their
    # own, so the checkout's editable finder there is never installed in this interpreter
    (purelib / "_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    inst = _run([py, "-m", "pip", "install", "--no-deps", "--no-index", wheel], cwd=tmp_path, env=env)
    if inst.returncode != 0 and "No matching distribution" in inst.stdout + inst.stderr:
        pytest.skip(f"pip cannot install offline here: {inst.stderr.strip()[-300:]}")
    assert inst.returncode == 0, inst.stdout[-3000:] + inst.stderr[-3000:]

    landed = sorted(p.name for p in purelib.iterdir()
                    if not p.name.endswith((".dist-info", ".pth")) and p.name not in TOOLING)
    print("\nsite-packages top level:", landed)
    assert landed == ["heads", "specdec", "specdec_jobs"]
    assert not GENERIC & set(landed)
    jobs = purelib / "specdec_jobs"
    print("specdec_jobs/:", sorted(p.name for p in jobs.iterdir()))
    yaml_here = sorted(p.relative_to(ROOT / "conf").as_posix() for p in (ROOT / "conf").rglob("*.yaml"))
    yaml_there = sorted(p.relative_to(jobs / "conf").as_posix() for p in (jobs / "conf").rglob("*.yaml"))
    assert yaml_there == yaml_here  # every Hydra config ships (a new conf group must be listed in pyproject)

    # outside the checkout, with the installed package only: no generic name is importable, the jobs are found
    # in the installed tree, and a run keeps its trio out of site-packages
    probe = _run([py, "-c", "import importlib.util as u, specdec, specdec.jobs as j, os; "
                  "print([n for n in ('data', 'train', 'eval', 'bench', 'diagnostics', 'rewards') if u.find_spec(n)]); "
                  "print(specdec.__file__); print(j.job_root()); j.installed_defaults(); "
                  "print(os.environ['SPECDEC_MODELS_DIR'])"], cwd=tmp_path, env=env)
    assert probe.returncode == 0, probe.stderr[-3000:]
    generic, spec_file, job_root, models_dir = probe.stdout.strip().splitlines()
    assert generic == "[]"
    assert Path(spec_file).is_relative_to(purelib) and Path(job_root) == jobs
    assert not Path(models_dir).is_relative_to(purelib)

    for script in SCRIPTS:
        r = _run([venv / "bin" / script, "--help"], cwd=tmp_path, env={**env, "OMP_NUM_THREADS": "1"})
        head = "\n".join(r.stdout.splitlines()[:6])
        print(f"--- {script} --help (rc {r.returncode})\n{head}")
        assert r.returncode == 0, f"{script}: {r.stdout[-2000:]}{r.stderr[-3000:]}"
        if script in ("specdec-train", "specdec-eval"):  # Hydra found conf/ in the installed tree
            assert "== Configuration groups ==" in r.stdout and "method: " in r.stdout and "task: " in r.stdout
        else:
            assert r.stdout.startswith("usage:")
    # and Hydra's search path is the installed conf/, not the checkout's
    r = _run([venv / "bin" / "specdec-eval", "--info", "searchpath"], cwd=tmp_path,
             env={**env, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0 and str(jobs / "conf") in r.stdout and str(ROOT) not in r.stdout, r.stdout[-2000:]
