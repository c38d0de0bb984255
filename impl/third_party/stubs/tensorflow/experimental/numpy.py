"""Not TensorFlow's numpy (see the package docstring): the one name etils.enp looks up."""


class ndarray:  # noqa: N801 (TensorFlow's name)
    """No instances."""
