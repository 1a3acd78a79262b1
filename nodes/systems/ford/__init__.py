"""FORD+ (FAST'22, as SMART's dtx/ runs it): one-sided OCC transactions on the rack (docs/dtx.md)."""

from .client import FordClient, FordTxn
from .layout import INVISIBLE, LOCKED, bucket_bytes, decode_item, encode_item, item_bytes
from .system import FAULTS, FordSystem

__all__ = ["FordSystem", "FordClient", "FordTxn", "FAULTS", "INVISIBLE", "LOCKED", "bucket_bytes", "decode_item",
           "encode_item", "item_bytes"]
