"""RAPTOR tree index builder, installed as ``rcp_agentic.raptor``.

Recursive clustering and summarisation of chunks into tree-node units with
levels (see DESIGN.md, "Flows"); the engine core does not depend on it yet.
"""
