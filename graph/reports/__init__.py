"""Community reports: one text per community, extractive offline or GraphRAG-style with an LLM.

* :mod:`.model` — what a report is made from and what it is (``ReportInput``,
  ``CommunityReport``, ``Finding``);
* :mod:`.plan` — what a report depends on: its members by centrality, its ranked relations
  and candidate chunks, and the key (``report_key``) that says when to rewrite it;
* :mod:`.extractive` — the offline writer (``ExtractiveReporter``);
* :mod:`.llm` — the GraphRAG-style writer (``LLMReporter``), falling back to the extractive.
"""
