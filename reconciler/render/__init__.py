"""Renderers: the desired state as the files and objects each scheduler reads."""
