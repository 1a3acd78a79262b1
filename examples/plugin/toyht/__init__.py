"""toy-ht, a small lock-based hash table on dmrack, shipped as a plugin in its own package;
lock-ht, its in-place sibling whose lock-free GETs must check a checksum (``lockht.py``); and
chain-kv, an out-of-place store whose blocks a CAS links into chains (``chainkv.py``), with the
narrow-window fault docs/checking.md ("Chaos") walks through.

Run it with ``PYTHONPATH=examples/plugin dmrack check --system toyht.ht:ToyHT`` or, installed
(``pip install -e examples/plugin``), by its entry-point name: ``dmrack check --system toy-ht``.
"""

from .chainkv import ChainKV, ChainKVClient
from .ht import ToyHT, ToyHTClient
from .lockht import LockHT, LockHTClient

__all__ = ["ToyHT", "ToyHTClient", "LockHT", "LockHTClient", "ChainKV", "ChainKVClient"]
