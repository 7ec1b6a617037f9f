"""An exported head whose format version or architecture does not match is refused by `load_head` with a clear
HeadFormatError (never loaded with wrong shapes, never a bare KeyError or RuntimeError)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from heads import EnsembleHead, HeadConfig, HeadFormatError, export_head, load_head
from heads.export import FORMAT_VERSION


@pytest.fixture()
def export(tmp_path) -> Path:
    torch.manual_seed(0)
    head = EnsembleHead(HeadConfig(hidden_q=6, hidden_p=10, num_features=5, arch="linear"))
    torch.nn.init.normal_(head.out.weight)
    return export_head(head, tmp_path / "head", {"models": {"target": "t", "draft": "d"}})


def _edit(path: Path, change) -> None:
    cfg = json.loads((path / "config.json").read_text())
    change(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


def test_the_export_loads_as_written(export):
    head, cfg = load_head(export, expect={"hidden_q": 6, "hidden_p": 10, "num_features": 5})
    assert cfg["format_version"] == FORMAT_VERSION and head.cfg.arch == "linear"


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0, str(FORMAT_VERSION), None])
def test_other_format_versions_are_refused(export, version):
    _edit(export, lambda c: c.update(format_version=version) if version is not None else c.pop("format_version"))
    with pytest.raises(HeadFormatError, match=rf"head format version {version} is not supported by this code "
                                              rf"\(version {FORMAT_VERSION}\); re-export it"):
        load_head(export)


def test_another_format_is_refused(export):
    _edit(export, lambda c: c.update(format="specdec-feature-drafter"))
    with pytest.raises(HeadFormatError, match="is not a specdec-ensemble-head config .format='specdec-feature-drafter'"):
        load_head(export)


@pytest.mark.parametrize("change,message", [
    (lambda a: a.update(arch="mlp"), "does not match its architecture"),  # weights of a linear head
    (lambda a: a.update(arch="mlp", mlp_hidden=3), "does not match its architecture"),
    (lambda a: a.update(use_hidden=False), "does not match its architecture"),
    (lambda a: a.update(arch="transformer"), "bad 'arch' entry .head arch must be 'linear' or 'mlp'"),
    (lambda a: a.update(depth=3), "bad 'arch' entry .unknown head config keys \\['depth'\\]"),
    (lambda a: a.pop("hidden_p"), "bad 'arch' entry"),
])
def test_architecture_that_does_not_match_the_weights_is_refused(export, change, message):
    _edit(export, lambda c: change(c["arch"]))
    with pytest.raises(HeadFormatError, match=message):
        load_head(export)


def test_missing_or_malformed_arch_is_refused(export):
    _edit(export, lambda c: c.pop("arch"))
    with pytest.raises(HeadFormatError, match="bad 'arch' entry"):
        load_head(export)
    _edit(export, lambda c: c.update(arch=["linear"]))
    with pytest.raises(HeadFormatError, match="bad 'arch' entry"):
        load_head(export)


@pytest.mark.parametrize("key", ["hidden_q", "hidden_p", "num_features"])
def test_summary_fields_that_contradict_the_architecture_are_refused(export, key):
    """`expect` is checked against the top-level widths; a config whose top-level widths differ from the
    architecture the head is built from would pass that check and then fail (or silently misread) at decode time."""
    _edit(export, lambda c: c.update({key: c[key] + 1}))
    with pytest.raises(HeadFormatError, match=f"{key} is .* at the top level but .* in its architecture"):
        load_head(export)
    # both changed: the architecture now disagrees with the weights
    _edit(export, lambda c: c["arch"].update({key: c[key]}))
    with pytest.raises(HeadFormatError, match="does not match its architecture"):
        load_head(export)
