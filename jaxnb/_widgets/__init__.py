"""Notebook-side views: devices table, mesh view, training dashboard."""
