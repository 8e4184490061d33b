"""Agentic retrieval on top of RCP: a corrective (CRAG-style) loop over confidence and sessions."""

from .evaluator import Assessment, ConfidenceEvaluator
from .loop import CorrectiveResult, CorrectiveRetriever, Step

__all__ = ["Assessment", "ConfidenceEvaluator", "CorrectiveResult", "CorrectiveRetriever", "Step"]
