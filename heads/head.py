"""The ensemble head (re-exported): it lives in the engine, `specdec.head`, which serves heads (the API, the registry,
`specdec.hf`). `from heads.head import EnsembleHead, HeadConfig` keeps working."""

from specdec.head import EnsembleHead, HeadConfig

__all__ = ["EnsembleHead", "HeadConfig"]
