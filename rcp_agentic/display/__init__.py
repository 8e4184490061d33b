"""Rich displays of results, graphs, trees and the engine for Jupyter (HTML and SVG)."""
