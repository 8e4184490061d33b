"""Framework integrations: LangChain and LlamaIndex retrievers over any RCP engine."""
