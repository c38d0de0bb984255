"""Not TensorFlow: a stand-in for the names kauldron and etils look up, in the jax-gemma environment.

kauldron 1.4.4 imports TensorFlow at module level only to name `tf.Tensor` in isinstance aliases
(kauldron/typing/array_types.py), and etils.enp, once a module named tensorflow is loaded, asks
whether an array or dtype is TensorFlow's (etils/enp/numpy_utils.py: `tf.dtypes.DType`,
`tf.TensorSpec`, `tf.__internal__.types.Tensor`, `tensorflow.experimental.numpy.ndarray`). gemma's
Gemma-4 never makes one, so every such check must answer no: these classes have no instances. The
600 MB TensorFlow wheel stays out of the environment (impl/third_party/jax_gemma_candidate.py).
"""
from types import SimpleNamespace


class Tensor:
    """No instances."""


class TensorSpec:
    """No instances."""


class DType:
    """No instances."""


dtypes = SimpleNamespace(DType=DType)
__internal__ = SimpleNamespace(types=SimpleNamespace(Tensor=Tensor))
