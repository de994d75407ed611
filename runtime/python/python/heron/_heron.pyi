"""Type stubs of Heron's native module (re-exported by `heron`)."""

from os import PathLike
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

StrPath = Union[str, "PathLike[str]"]
Inputs = Union[Mapping[str, npt.ArrayLike], Sequence[npt.ArrayLike], np.ndarray]

class HeronError(Exception):
    """An error from Heron: a model it cannot load or compile, inputs that do not match, a
    run that failed. The message says what and where."""

class TensorInfo:
    """An input or output of a model."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...

class Model:
    """An imported ONNX model, verified, ready to compile."""

    @property
    def name(self) -> str: ...
    @property
    def inputs(self) -> List[TensorInfo]: ...
    @property
    def outputs(self) -> List[TensorInfo]: ...
    def compile(
        self,
        *,
        threads: Optional[int] = None,
        target: str = "cpu",
        engine: str = "jit",
        kernels: bool = True,
        vta_config: Optional[StrPath] = None,
        guard_pages: Optional[str] = None,
    ) -> CompiledModel:
        """Compiles the model. target: "cpu" or "vta" (int8 regions of a quantized model
        offloaded to VTA); engine: "jit", "interp" or "aot"; threads: default the physical
        cores (results are the same bits on any count)."""
    def run_interpreter(self, inputs: Inputs) -> Dict[str, np.ndarray]:
        """Runs the reference interpreter (the oracle)."""

class CompiledModel:
    """A compiled model; `run` is safe to call from several threads at once."""

    @property
    def name(self) -> str: ...
    @property
    def inputs(self) -> List[TensorInfo]: ...
    @property
    def outputs(self) -> List[TensorInfo]: ...
    @property
    def engine(self) -> str: ...
    @property
    def compile_ms(self) -> float: ...
    @property
    def pools(self) -> Dict[str, int]: ...
    def run(self, inputs: Inputs) -> Dict[str, np.ndarray]:
        """Runs the model: inputs as a dict by name, a list in input order, or one array for a
        one-input model. Returns the outputs by name."""

def load(
    path: StrPath,
    *,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    dims: Optional[Mapping[str, int]] = None,
) -> Model:
    """Loads an ONNX model; input_shapes and dims bind symbolic dimensions."""

def load_aot(dir: StrPath) -> CompiledModel:
    """Loads a model compiled ahead of time into `dir`."""

def compile_aot(
    model: Model,
    out_dir: StrPath,
    *,
    name: Optional[str] = None,
    kernels: bool = False,
    threads: int = 1,
    embed_workspace: bool = False,
) -> Dict[str, str]:
    """Compiles ahead of time into out_dir; returns the "object" and "header" paths and the
    "link" command line."""

def quantize(
    path: StrPath,
    output: StrPath,
    calibration: Optional[Sequence[Inputs]] = None,
    *,
    per_channel: bool = False,
    percentile: Optional[float] = None,
    skip: Sequence[str] = (),
    global_scale: Optional[float] = None,
    scales: str = "pow2",
) -> Dict[str, Any]:
    """Quantizes an ONNX model to int8 QDQ form and writes it to `output`."""
