"""The Retrieval Context Protocol (RCP/1) over an Engine: the transport-agnostic dispatcher."""
