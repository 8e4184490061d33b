"""The trust of a derived or generated text (RCP §7.7.2, §15.2): one rule for all of them.

A tree summary, a node's description, a community report and its title, a ``global`` or
``drift`` answer, a rewritten query: each is made from sources, often by a model that read
them. Such a text claims no more trust than the **least trusted of its sources**
(``level``), and is ``injectionSuspected`` when **any source was suspected**, or when the
**text itself** screens positive: the injection screen (:mod:`.screen`), or markup a model
has no reason to write into a summary (:func:`markup_signals`: tags that load or run
something, event handlers, ``javascript:`` links, remote markdown images).

:func:`derived_trust` is that rule; :func:`screen_derived` the screening of one text;
:func:`strip_markup` takes the active markup out of *generated* text (model output), which is
then also ``sanitized``. Extractive text (quoted source sentences) is only screened, never
rewritten: its spans point into the sources.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..store.reads import lowest_trust
from ..vocabulary import TrustLevel
from ..wire import Trust
from .screen import InjectionScreen, Screening

__all__ = ["MARKUP_SIGNAL", "derived_trust", "markup_signals", "screen_derived",
           "strip_markup"]

# The signal name a derived text's markup raises (beside the injection screen's own).
MARKUP_SIGNAL = "markup"

# Tags that load, embed or run something (any attribute), or restyle the page.
_ACTIVE_TAGS = (r"script|img|image|iframe|frame|frameset|object|embed|applet|svg|math|style"
                r"|link|meta|base|form|input|button|textarea|video|audio|source|track"
                r"|picture|portal|marquee|template|xml|xss")
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("html_tag", re.compile(rf"<\s*/?\s*(?:{_ACTIVE_TAGS})\b", re.I)),
    ("event_handler", re.compile(r"<[a-z][^<>]*?[\s/\"']on[a-z]{3,}\s*=", re.I)),
    ("script_url", re.compile(r"(?:java|vb|live)script\s*:|\bdata\s*:\s*text/html", re.I)),
    ("markdown_image", re.compile(r"!\[[^\]\n]{0,200}\]\(\s*<?\s*(?:https?:)?//", re.I)),
)
# What strip_markup removes: script/style blocks with their content, then any HTML tag (an
# element name after "<"), script links' schemes; a remote markdown image keeps its alt text.
_BLOCKS = re.compile(r"<\s*(script|style|template)\b[^>]*>.*?(?:<\s*/\s*\1\s*>|$)", re.I | re.S)
_ANY_TAG = re.compile(r"<\s*/?\s*[a-z][a-z0-9:-]*(?:[\s/][^<>]*)?\s*(?:>|$)", re.I)
_SCRIPT_URL = re.compile(r"(?:java|vb|live)script\s*:|\bdata\s*:\s*text/html[^\s)\"'>]*",
                         re.I)
_MD_IMAGE = re.compile(r"!\[([^\]\n]{0,200})\]\(\s*<?\s*(?:https?:)?//[^)\s]*[^)]*\)", re.I)


def markup_signals(text: str) -> tuple[str, ...]:
    """Which kinds of active markup ``text`` carries (empty: none)."""
    if not text or ("<" not in text and ":" not in text and "![" not in text):
        return ()
    return tuple(name for name, pattern in _PATTERNS if pattern.search(text))


def strip_markup(text: str) -> tuple[str, bool]:
    """``text`` without its active markup (see the module doc) and whether any was taken out.
    Text without a :func:`markup_signals` signal comes back as it is."""
    if not markup_signals(text):
        return text, False
    out = text
    for _ in range(3):  # markup that reassembles once stripped ("<scr<script>ipt>") goes again
        out = _BLOCKS.sub(" ", out)
        out = _MD_IMAGE.sub(lambda m: m.group(1), out)
        out = _ANY_TAG.sub(" ", out)
        out = _SCRIPT_URL.sub("", out)
        if not markup_signals(out):
            break
    else:  # still there: no angle bracket is left
        out = _SCRIPT_URL.sub("", out.replace("<", " ").replace(">", " "))
    return " ".join(out.split()), True


def screen_derived(screen: InjectionScreen, text: str) -> Screening:
    """The screening of a derived text: the injection screen's, and suspected (signal
    :data:`MARKUP_SIGNAL`) when it carries active markup."""
    got = screen.screen(text) if text else Screening(False, 0.0, ())
    if not markup_signals(text):
        return got
    return Screening(suspected=True, score=max(got.score, screen.threshold),
                     signals=tuple(sorted({*got.signals, MARKUP_SIGNAL})))


def derived_trust(sources: Iterable[Trust | None], texts: Iterable[str],
                  screen: InjectionScreen, *, sanitized: bool = False,
                  default: TrustLevel = "untrusted") -> Trust:
    """The trust of a text made from ``sources`` (their trust; None: unknown, ignored) whose
    own words are ``texts``: the lowest level of the sources (``default`` without any),
    ``injectionSuspected`` when any source is or any text screens positive
    (:func:`screen_derived`); ``sanitized`` when markup was taken out of it (which counts as
    suspected too: its model wrote markup)."""
    known = [s for s in sources if s is not None]
    level = lowest_trust(s.level for s in known) if known else default
    suspected = sanitized or any(bool(s.injection_suspected) for s in known) or any(
        screen_derived(screen, t).suspected for t in texts if t)
    was_sanitized = sanitized or any(bool(s.sanitized) for s in known)
    return Trust(level=level, injection_suspected=suspected,
                 sanitized=True if was_sanitized else None)
