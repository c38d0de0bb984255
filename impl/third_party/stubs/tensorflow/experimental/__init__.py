"""Not TensorFlow (see the package docstring)."""
