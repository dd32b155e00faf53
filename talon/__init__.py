"""TALON Tree Explorer's algorithm package.

Kept free of gradio and plotly.  Importing ``talon`` itself does not import torch either, so
``talon.tree``, ``talon.trace`` and ``talon.metrics`` can be used by ``viz`` on a machine without it.
"""
