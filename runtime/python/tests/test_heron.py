"""The `heron` Python package against the reference models' stored ONNX Runtime outputs, with
bad inputs, several threads, ahead-of-time compilation and quantization. Run on the installed
wheel (`.ci/run` builds it into a fresh virtual environment)."""

import os
import pathlib
import threading

import numpy as np
import pytest

import heron

SHARED = pathlib.Path(os.environ.get("HERON_SHARED", pathlib.Path(__file__).resolve().parents[4] / "shared"))
REFERENCE = SHARED / "reference"


def reference_inputs(name):
    inputs = [np.load(REFERENCE / f"{name}.input.npy")]
    second = REFERENCE / f"{name}.input1.npy"
    if second.exists():
        inputs.append(np.load(second))
    return inputs


def assert_close(got, want):
    """The project's float rule: |got - want| <= 1e-4 * max(1, |want|) per element."""
    assert got.shape == want.shape and got.dtype == want.dtype
    err = np.abs(got.astype(np.float64) - want) / np.maximum(1.0, np.abs(want))
    assert err.max() <= 1e-4, f"worst relative error {err.max():.3g}"


@pytest.mark.parametrize(
    "name", ["tiny_relu", "mlp", "lenet", "mobilenet_ish", "resnet18", "mobilenet_v2", "bert_tiny", "gpt2_tiny"]
)
def test_reference_models_match_onnx_runtime(name):
    compiled = heron.load(REFERENCE / f"{name}.onnx").compile(threads=2)
    outputs = compiled.run(reference_inputs(name))
    assert list(outputs) == [o.name for o in compiled.outputs]
    assert_close(outputs[compiled.outputs[0].name], np.load(REFERENCE / f"{name}.ref.npy"))


@pytest.mark.parametrize("engine", ["jit", "interp"])
def test_engines_and_input_forms_agree(engine):
    model = heron.load(str(REFERENCE / "lenet.onnx"))
    compiled = model.compile(engine=engine, threads=1, kernels=False)
    assert compiled.engine == engine
    (x,) = reference_inputs("lenet")
    want = np.load(REFERENCE / "lenet.ref.npy")
    name = compiled.inputs[0].name
    for given in ({name: x}, [x], (x,), x):
        assert_close(next(iter(compiled.run(given).values())), want)
    assert_close(next(iter(model.run_interpreter([x]).values())), want)


def test_introspection():
    model = heron.load(REFERENCE / "bert_tiny.onnx")
    compiled = model.compile(threads=1)
    for infos in (model.inputs, compiled.inputs):
        assert [i.name for i in infos] == ["input_ids", "attention_mask"]
        assert infos[0].shape == (1, 32)
        assert infos[0].dtype == np.dtype("int64")
    assert compiled.outputs[0].shape == (1, 32, 128)
    assert compiled.outputs[0].dtype == np.float32
    assert compiled.compile_ms > 0
    assert sum(compiled.pools.values()) > 0
    assert "bert_tiny" in repr(model)
    assert heron.__version__


def test_outputs_are_ordinary_arrays():
    compiled = heron.load(REFERENCE / "mlp.onnx").compile(threads=1)
    out = next(iter(compiled.run(reference_inputs("mlp")).values()))
    assert isinstance(out, np.ndarray) and out.flags.c_contiguous and out.flags.writeable
    out[...] = 0  # the array is the caller's: a second run does not touch it
    again = next(iter(compiled.run(reference_inputs("mlp")).values()))
    assert np.any(again != 0)


def test_lists_take_the_inputs_dtype():
    compiled = heron.load(REFERENCE / "tiny_relu.onnx").compile(threads=1)
    values = [[-1.0, 2.0] * 8]
    (out,) = compiled.run([values]).values()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.maximum(np.array(values, np.float32), 0))


def test_bad_inputs_raise_heron_errors():
    compiled = heron.load(REFERENCE / "lenet.onnx").compile(threads=1)
    (x,) = reference_inputs("lenet")
    cases = {
        "must be f32[1, 1, 28, 28], got f32[1, 1, 28, 27]": [x[..., :27]],
        "got f64": [x.astype(np.float64)],
        "takes 1 input": [x, x],
        "no input named 'nope'": {"nope": x},
    }
    for message, given in cases.items():
        with pytest.raises(heron.HeronError) as err:
            compiled.run(given)
        assert message in str(err.value), str(err.value)
    with pytest.raises(TypeError, match="dict"):
        compiled.run(42)
    with pytest.raises(TypeError, match="dtype"):
        compiled.run([x.astype(np.complex64)])


def test_bad_models_and_options_raise(tmp_path):
    with pytest.raises(heron.HeronError, match="nothing.onnx"):
        heron.load(tmp_path / "nothing.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07not a protobuf at all\xff\xff\xff")
    with pytest.raises(heron.HeronError):
        heron.load(garbage)
    model = heron.load(REFERENCE / "mlp.onnx")
    with pytest.raises(ValueError, match="engine"):
        model.compile(engine="gpu")
    with pytest.raises(ValueError, match="target"):
        model.compile(target="tpu")
    with pytest.raises(ValueError, match="threads"):
        model.compile(threads=0)


def test_threads_share_one_compiled_model():
    compiled = heron.load(REFERENCE / "resnet18.onnx").compile(threads=1)
    (x,) = reference_inputs("resnet18")
    want = np.load(REFERENCE / "resnet18.ref.npy")
    results, errors = [], []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(3):
                noise = rng.standard_normal(x.shape).astype(np.float32)
                # A private input first, then the reference one: a shared workspace would mix them.
                compiled.run([noise])
                results.append(next(iter(compiled.run([x]).values())))
        except Exception as e:  # reported below, with the thread's failure
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 12
    for got in results:
        assert_close(got, want)
        np.testing.assert_array_equal(got, results[0])


def test_compile_aot_and_load_it(tmp_path):
    model = heron.load(REFERENCE / "mlp.onnx")
    written = heron.compile_aot(model, tmp_path, name="mlp")
    assert pathlib.Path(written["object"]).exists() and pathlib.Path(written["header"]).exists()
    assert written["link"].startswith("cc prog.c ") and written["link"].endswith("-lm")
    compiled = heron.load_aot(tmp_path)
    assert compiled.engine == "aot"
    assert_close(next(iter(compiled.run(reference_inputs("mlp")).values())), np.load(REFERENCE / "mlp.ref.npy"))


def test_quantize_then_offload_to_vta(tmp_path):
    out = tmp_path / "lenet.int8.onnx"
    (x,) = reference_inputs("lenet")
    report = heron.quantize(REFERENCE / "lenet.onnx", out, [[x]])
    assert report["anchors"] and report["activations"]
    model = heron.load(out)
    cpu = next(iter(model.compile(threads=1).run([x]).values()))
    vta = next(iter(model.compile(target="vta", threads=1).run([x]).values()))
    interp = next(iter(model.run_interpreter([x]).values()))
    # VTA computes the CPU's integer form bit for bit; the interpreter runs the QDQ model in
    # float (ONNX's semantics), a few quantization steps away.
    np.testing.assert_array_equal(vta, cpu)
    step = max(scale for _, scale in report["activations"])
    assert np.abs(cpu - interp).max() <= 4 * step
    with pytest.raises(ValueError, match="scales"):
        heron.quantize(REFERENCE / "lenet.onnx", out, [[x]], scales="log")
