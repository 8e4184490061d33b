"""Knowledge-graph index builder, installed as ``rcp_agentic.graph``.

Concepts/entities, relations, Leiden communities and their summaries are built
here (see DESIGN.md, "Flows"); the engine core does not depend on it yet.
"""
