"""How dmrack's one-line error messages show what the user wrote: one place for the conventions.

A refused input is one line naming the problem and the place (the project's rule for bad input).
Three things every such line needs were written many times, each a little differently, so they are
declared here once and every layer (shm, workloads, nodes, cluster) uses them:

* :func:`clip`: a value echoed back is cut to :data:`CLIP_CHARS` characters, with the length of
  what was cut. A 100,000-character name pasted by mistake must not fill the terminal, and the
  head of a value is enough to recognise it.
* :func:`did_you_mean`: the closest known name to a misspelt one (``difflib``'s ratio >= 0.6,
  the cutoff its own ``get_close_matches`` defaults to), as "; did you mean X?" appended to the
  line, or nothing when no name is close.
* :func:`item`: positions in a list count from 1 in messages (``steer[1]`` is the first
  ``[[steer]]`` rule, ``step[1]`` the first ``[[step]]``, ``hosts[1]`` the first host), as the
  results table numbers steps and as files number lines: a person counts the first one as 1.
* :func:`show_toml`: a value echoed back as it would be written in TOML (``true``, ``"cn9"``,
  ``100`` for ``100.0``), so the message shows the line the user wrote. (Here rather than with the
  spec, so that the scenario's step types, which live with the nodes that run them, describe
  themselves with it.)
* :func:`one_line`: a message or an exception with every run of whitespace as one space, how the
  rack prints a failure in one line.

It also declares :class:`SystemGaveUp`, a system's failure a workload reports (a full table): the
systems raise it and the rack stops on it, and so does the two-sided RPC server of ``shm/rpc.py``,
which must tell it from a handler's ordinary error without importing the systems' floor. It is
re-exported as ``nodes.systems.api.SystemGaveUp``, where systems and plugins find it. Its name
before issue 42, ``SystemError_`` (a builtin's name with an underscore), stays an alias here and in
``nodes.systems.api`` for code written against it.

Standard library only, so that the lowest layer can import it.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

__all__ = ["CLIP_CHARS", "clip", "did_you_mean", "item", "show_toml", "one_line", "SystemGaveUp", "SystemError_"]

#: The most characters of a user's value a message repeats (a long path or a TOML inline table
#: still fits whole; a pasted blob does not).
CLIP_CHARS = 120


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and how much was left out."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def did_you_mean(word, choices, quote: bool = False) -> str:
    """"; did you mean X?" for the choice closest to ``word`` (``quote``: X in quotes), or ""."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?" if quote else f"; did you mean {close[0]}?"


def item(name: str, index0: int) -> str:
    """The message name of the entry at 0-based ``index0`` of the list ``name``: ``name[index0 + 1]``."""
    return f"{name}[{index0 + 1}]"


def show_toml(v: Any) -> str:
    """A value as it would be written in TOML, for messages (a long one cut: :func:`clip`)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(clip(v), ensure_ascii=False)
    if isinstance(v, float):
        return repr(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    if isinstance(v, dict):
        return clip("{" + ", ".join(f"{k} = {show_toml(x)}" for k, x in v.items()) + "}")
    if isinstance(v, list):
        return clip("[" + ", ".join(show_toml(x) for x in v) + "]")
    return clip(str(v))


def one_line(text) -> str:
    """``text`` (a message, an exception) with every run of whitespace, newlines included, as one
    space: how the rack prints a failure in one line."""
    return " ".join(str(text).split())


class SystemGaveUp(RuntimeError):
    """The system gave up on an operation or its setup: a failure a workload should report (the
    table is full, out of memory, an operation that never settled), not a bug of the emulator."""

    def one_line(self) -> str:
        """The message alone (``str()`` of an exception may carry notes), in one line."""
        return one_line(self.args[0] if self.args else "")


#: The name :class:`SystemGaveUp` had before issue 42, kept for systems and plugins that import it.
SystemError_ = SystemGaveUp
