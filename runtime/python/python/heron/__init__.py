"""Heron: a small-footprint ML compiler and runtime.

Load an ONNX model, compile it (Cranelift machine code, statically planned memory), run it
on numpy arrays::

    import heron, numpy as np
    model = heron.load("resnet18.onnx")
    compiled = model.compile(threads=2)
    outputs = compiled.run({"input": np.zeros((1, 3, 224, 224), np.float32)})

`compiled.run` may be called from several threads at once; it runs without the GIL.
"""

from ._heron import (
    CompiledModel,
    HeronError,
    Model,
    TensorInfo,
    __version__,
    compile_aot,
    load,
    load_aot,
    quantize,
)

__all__ = [
    "CompiledModel",
    "HeronError",
    "Model",
    "TensorInfo",
    "__version__",
    "compile_aot",
    "load",
    "load_aot",
    "quantize",
]
