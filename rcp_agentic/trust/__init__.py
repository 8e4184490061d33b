"""The trust of text: the injection screen (:mod:`.screen`, its rules as data in
:mod:`.rules`) and the one rule for what a derived or generated text may claim
(:mod:`.derived`). Used by ingest, the derived builders, query transforms and the graph."""

from .derived import derived_trust, markup_signals, screen_derived, strip_markup
from .screen import InjectionScreen, Screening

__all__ = ["InjectionScreen", "Screening", "derived_trust", "markup_signals", "screen_derived",
           "strip_markup"]
