"""The package version, where the protocol and the clients read it without importing the package."""

__version__ = "0.1.0"
