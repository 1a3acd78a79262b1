"""Dolphin (MSST'24): a hybrid index on disaggregated memory, ART internal nodes over B+-tree-like
leaves (docs/dolphin.md). ``layout``: the leaf; ``client``: the walk, Spear, SMOs and scans;
``system``: the System contract."""

from .system import DolphinSystem

__all__ = ["DolphinSystem"]
