"""Agentic retrieval on top of RCP: a corrective (CRAG-style) loop over confidence and sessions
that follows multi-hop bridge entities with no LLM."""

from .evaluator import Assessment, ConfidenceEvaluator
from .loop import CorrectiveRetriever
from .result import CorrectiveResult, Step

__all__ = ["Assessment", "ConfidenceEvaluator", "CorrectiveResult", "CorrectiveRetriever", "Step"]
