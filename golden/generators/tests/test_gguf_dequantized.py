"""golden/generators/gguf_dequantized.py on GGUF files written here by gguf-py, as a converter would:
tensors renamed and reshaped, 2-D weights in Q8_0 or Q4_0, 1-D ones in F32, one tensor of the
converter's own. The dequantized checkpoint holds exactly gguf-py's dequantization of what the file
stores; each way the files can disagree with the checkpoint is refused, naming the tensor; and a
tensor that moved further than quantization to its type can (zeroed, scales off) fails by name.

    .venv/bin/python -m pytest golden/generators/tests/test_gguf_dequantized.py
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
from gguf_dequantized import MatchError, bound_ratio, dequantized_checkpoint, read_gguf  # noqa: E402

SCRIPT = HERE / "gguf_dequantized.py"


def checkpoint() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    k = rng.standard_normal((32, 64)).astype(np.float32) * 0.1
    return {
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((64, 64)).astype(np.float32) * 0.1,
        "model.layers.0.self_attn.k_proj.weight": k,
        "model.layers.1.self_attn.k_proj.weight": k.copy(),  # equal tensors: both names take the values
        "model.norm.weight": rng.uniform(0.5, 1.5, 64).astype(np.float32),
        "model.embed_tokens.weight": rng.standard_normal((16, 64)).astype(np.float32),
    }


# checkpoint name -> GGUF name, as a converter renames (and flattens one tensor's shape)
NAMES = {"model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
         "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
         "model.layers.1.self_attn.k_proj.weight": "blk.1.attn_k.weight",
         "model.norm.weight": "output_norm.weight",
         "model.embed_tokens.weight": "token_embd.weight"}


def write_gguf(path: Path, tensors: dict[str, np.ndarray], types: dict[str, T], file_type: int | None = None) -> Path:
    """A GGUF file of these tensors, each in its type (F32 when not named), quantized by gguf-py;
    general.file_type `file_type` where given (gguf.LlamaFileType)."""
    writer = gguf.GGUFWriter(str(path), "gemma4")
    if file_type is not None:
        writer.add_file_type(file_type)
    for name, values in tensors.items():
        kind = types.get(name, T.F32)
        if kind == T.F32:
            writer.add_tensor(name, np.ascontiguousarray(values, dtype=np.float32))
        else:
            writer.add_tensor(name, quantize(values, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def convert(ckpt: dict[str, np.ndarray], transform=lambda name, w: w) -> dict[str, np.ndarray]:
    """The converter: renamed tensors, plus one of its own that no checkpoint tensor holds."""
    out = {NAMES[n]: transform(n, w) for n, w in ckpt.items()}
    out["rope_freqs.weight"] = np.array([1.0] * 4 + [1e30] * 4, dtype=np.float32)
    return out


def quantized_types(kind: T) -> dict[str, T]:
    return {NAMES[n]: kind for n, w in checkpoint().items() if w.ndim == 2}


@pytest.mark.parametrize("kind", [T.Q8_0, T.Q4_0])
def test_every_tensor_becomes_the_dequantized_values_the_file_stores(tmp_path, kind):
    ckpt = checkpoint()
    tensors = convert(ckpt)
    bridge = read_gguf(write_gguf(tmp_path / "f32.gguf", tensors, {}))
    quantized = read_gguf(write_gguf(tmp_path / "q.gguf", tensors, quantized_types(kind)))
    state, records, generated = dequantized_checkpoint(bridge, quantized, ckpt)

    assert generated == ["rope_freqs.weight"]
    assert set(state) == set(ckpt)
    for r in records:
        w = ckpt[r.checkpoint_name]
        source = next(n for n, g in NAMES.items() if g == r.stored_name)  # twins may share one GGUF tensor
        assert np.array_equal(ckpt[source], w)
        if w.ndim == 2:
            expected = dequantize(quantize(w, kind), kind).reshape(w.shape)
            assert r.stored_type == kind.name
            assert np.array_equal(state[r.checkpoint_name], expected)  # bit for bit what the file holds
            assert 0 < r.max_abs_change  # quantized: not the float weight
            # Q8_0: a block's step is its max|w| / 127, so rounding moves a value by half a step at most.
            # Q4_0: the step is max|w| / 8 with codes -8..7, so the side opposite the block's extreme
            # clamps at 7 steps: up to one step off.
            assert r.max_abs_change <= r.max_abs / (254 if kind == T.Q8_0 else 8) * 1.01
            assert 0 < r.bound_ratio <= 1  # within the type's own bound, block by block
        else:
            assert r.stored_type == "F32" and np.array_equal(state[r.checkpoint_name], w) and r.max_abs_change == 0
            assert r.bound_ratio == 0


def test_a_value_the_converter_changed_is_refused_by_name(tmp_path):
    ckpt = checkpoint()
    shifted = convert(ckpt, lambda name, w: w + 1 if name == "model.norm.weight" else w)  # a norm stored as 1 + w
    bridge = read_gguf(write_gguf(tmp_path / "f32.gguf", shifted, {}))
    quantized = read_gguf(write_gguf(tmp_path / "q.gguf", shifted, quantized_types(T.Q8_0)))
    with pytest.raises(MatchError, match=r"model\.norm\.weight"):
        dequantized_checkpoint(bridge, quantized, ckpt)


def test_files_of_two_conversions_are_refused_by_name(tmp_path):
    ckpt = checkpoint()
    tensors = convert(ckpt)
    bridge = read_gguf(write_gguf(tmp_path / "f32.gguf", tensors, {}))
    fewer = {n: w for n, w in tensors.items() if n != "blk.0.attn_q.weight"}
    quantized = read_gguf(write_gguf(tmp_path / "q.gguf", fewer, quantized_types(T.Q8_0)))
    with pytest.raises(MatchError, match=r"blk\.0\.attn_q\.weight"):
        dequantized_checkpoint(bridge, quantized, ckpt)
    # the quantized file given as the bridge: its values are no checkpoint's
    quantized_full = read_gguf(write_gguf(tmp_path / "q2.gguf", tensors, quantized_types(T.Q8_0)))
    with pytest.raises(MatchError, match="F32"):
        dequantized_checkpoint(quantized_full, quantized_full, ckpt)


def test_equal_tensors_quantized_differently_are_ambiguous(tmp_path):
    ckpt = checkpoint()
    tensors = convert(ckpt)
    types = quantized_types(T.Q8_0) | {"blk.1.attn_k.weight": T.Q4_0}  # the twin of blk.0.attn_k, another type
    bridge = read_gguf(write_gguf(tmp_path / "f32.gguf", tensors, {}))
    quantized = read_gguf(write_gguf(tmp_path / "q.gguf", tensors, types))
    with pytest.raises(MatchError, match="ambiguous"):
        dequantized_checkpoint(bridge, quantized, ckpt)


def test_the_command_writes_a_checkpoint_and_refuses_with_a_line(tmp_path):
    from safetensors.numpy import load_file, save_file

    ckpt = checkpoint()
    case = tmp_path / "case"
    case.mkdir()
    save_file(ckpt, str(case / "model.safetensors"))
    (case / "config.json").write_text("{}")
    tensors = convert(ckpt)
    bridge = write_gguf(tmp_path / "f32.gguf", tensors, {})
    quantized = write_gguf(tmp_path / "q.gguf", tensors, quantized_types(T.Q4_0))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(SCRIPT), str(case), "--float", str(bridge), "--quantized", str(quantized),
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = load_file(str(out / "model.safetensors"))
    assert set(written) == set(ckpt) and (out / "config.json").is_file()
    report = json.loads((out / "quantization.json").read_text())
    assert report["types"] == {"F32": 1, "Q4_0": 4} and report["converter_tensors"] == ["rope_freqs.weight"]

    shifted = convert(ckpt, lambda name, w: w * 2 if name == "model.embed_tokens.weight" else w)
    done = subprocess.run([sys.executable, str(SCRIPT), str(case), "--float",
                           str(write_gguf(tmp_path / "f32b.gguf", shifted, {})), "--quantized",
                           str(write_gguf(tmp_path / "qb.gguf", shifted, quantized_types(T.Q4_0))), "--out",
                           str(tmp_path / "out2")], capture_output=True, text=True)
    assert done.returncode == 1 and "model.embed_tokens.weight" in done.stderr.splitlines()[-1]
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("kind", [T.Q8_0, T.Q4_0])
def test_a_zeroed_tensor_exceeds_its_types_bound(kind):
    w = checkpoint()["model.layers.0.self_attn.q_proj.weight"]
    q = dequantize(quantize(w, kind), kind)
    assert bound_ratio(w, q, kind.name) <= 1
    assert bound_ratio(w, np.zeros_like(w), kind.name) > 1  # experts dropped at export: zeros in the file


def test_wrong_scales_exceed_the_bound_down_to_the_types_resolution():
    """Every block's scale off by a factor (scales applied twice, a wrong dtype for d): Q8_0's bound
    sees 2%, Q4_0's (a step is an eighth of the block's range) 10% but not 2%."""
    w = checkpoint()["model.layers.0.self_attn.q_proj.weight"]
    for kind, factor, caught in ((T.Q8_0, 1.02, True), (T.Q4_0, 1.1, True), (T.Q4_0, 1.02, False)):
        q = dequantize(quantize(w, kind), kind) * factor
        assert (bound_ratio(w, q, kind.name) > 1) is caught, (kind.name, factor)


def test_f16_rounding_of_tiny_values_is_within_bound():
    w = np.array([1e-7, -3e-6, 2e-5, 0.5, 0.0], dtype=np.float32)  # f16 subnormals round absolutely
    assert bound_ratio(w, w.astype(np.float16).astype(np.float32), "F16") <= 1
    assert bound_ratio(w, w * 1.01, "F16") > 1
    assert bound_ratio(w, w, "Q4_K") is None  # no bound for the K-quants here: reported, not judged


def test_the_command_fails_naming_a_tensor_quantization_cannot_explain(tmp_path):
    from safetensors.numpy import save_file

    ckpt = checkpoint()
    case = tmp_path / "case"
    case.mkdir()
    save_file(ckpt, str(case / "model.safetensors"))
    tensors = convert(ckpt)
    zeroed = dict(tensors, **{"blk.0.attn_q.weight": np.zeros_like(tensors["blk.0.attn_q.weight"])})
    done = subprocess.run([sys.executable, str(SCRIPT), str(case), "--float",
                           str(write_gguf(tmp_path / "f32.gguf", tensors, {})), "--quantized",
                           str(write_gguf(tmp_path / "q.gguf", zeroed, quantized_types(T.Q8_0))), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 1
    assert "model.layers.0.self_attn.q_proj.weight (Q8_0" in done.stderr.splitlines()[-1]
    assert (tmp_path / "out" / "model.safetensors").is_file()  # what the implementation loads, written anyway


def test_a_matrix_left_unquantized_in_a_quantized_file_is_named(tmp_path):
    """NVIDIA/Model-Optimizer #1173's class (fused experts the quantizer skipped): a matrix llama.cpp's
    quantizer would take, stored F16/F32 in a file that declares a quantized type, fails the file by
    name; what llama.cpp keeps as it is does not (norms, routers, rows that are not whole blocks)."""
    from safetensors.numpy import save_file

    from gguf_dequantized import GgufTensor, left_unquantized

    def t(name, shape, kind):
        return GgufTensor(name, kind, np.zeros(1, np.float32), shape)

    assert left_unquantized(t("blk.0.ffn_gate_up_exps.weight", (64, 32, 8), "F16"), "MOSTLY_Q4_0")
    assert left_unquantized(t("blk.0.attn_q.weight", (64, 64), "F32"), "MOSTLY_Q8_0")
    assert not left_unquantized(t("blk.0.attn_q.weight", (64, 64), "Q4_0"), "MOSTLY_Q4_0")
    assert not left_unquantized(t("blk.0.attn_q.weight", (64, 64), "F16"), "MOSTLY_F16")  # a float file
    assert not left_unquantized(t("blk.0.attn_q.weight", (64, 64), "F16"), None)  # nothing declared
    assert not left_unquantized(t("output_norm.weight", (64,), "F32"), "MOSTLY_Q4_0")
    assert not left_unquantized(t("blk.0.ffn_gate_inp.weight", (64, 8), "F32"), "MOSTLY_Q4_0")  # the router
    assert not left_unquantized(t("blk.0.ffn_down_exps.weight", (16, 64, 8), "F16"), "MOSTLY_Q4_0")  # rows of 16

    ckpt = checkpoint()
    case = tmp_path / "case"
    case.mkdir()
    save_file(ckpt, str(case / "model.safetensors"))
    tensors = convert(ckpt)
    types = {n: k for n, k in quantized_types(T.Q4_0).items() if n != "blk.0.attn_q.weight"}  # q_proj left F32
    command = [sys.executable, str(SCRIPT), str(case), "--float", str(write_gguf(tmp_path / "f32.gguf", tensors, {})),
               "--out", str(tmp_path / "out"), "--quantized"]
    declared = write_gguf(tmp_path / "q.gguf", tensors, types, gguf.LlamaFileType.MOSTLY_Q4_0)
    done = subprocess.run([*command, str(declared)], capture_output=True, text=True)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "left unquantized in a quantized file: model.layers.0.self_attn.q_proj.weight (F32)" in done.stderr
    record = json.loads((tmp_path / "out" / "quantization.json").read_text())
    assert [r["checkpoint_name"] for r in record["tensors"] if r["left_unquantized"]] == [
        "model.layers.0.self_attn.q_proj.weight"]
    # The same file without a declared type: nothing says q_proj should have been quantized.
    undeclared = write_gguf(tmp_path / "u.gguf", tensors, types)
    assert subprocess.run([*command, str(undeclared)], capture_output=True, text=True).returncode == 0


def test_experts_the_quantizer_skipped_fail_the_file(tmp_path):
    """impl/third_party/gguf_faults.py experts-unquantized (NVIDIA/Model-Optimizer #1173's class) on a
    file with fused experts: the rewritten file keeps every other tensor and the metadata, stores the
    experts F16 from the float values, and gguf_dequantized.py fails it naming them; the original passes."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    ckpt = {"model.layers.0.experts.gate_up_proj": rng.standard_normal((4, 64, 64)).astype(np.float32) * 0.1,
            "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((64, 64)).astype(np.float32) * 0.1,
            "model.layers.0.router.proj.weight": rng.standard_normal((4, 64)).astype(np.float32)}
    names = {"model.layers.0.experts.gate_up_proj": "blk.0.ffn_gate_up_exps.weight",
             "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
             "model.layers.0.router.proj.weight": "blk.0.ffn_gate_inp.weight"}  # llama.cpp keeps routers F32
    case = tmp_path / "case"
    case.mkdir()
    save_file(ckpt, str(case / "model.safetensors"))
    tensors = {names[n]: w for n, w in ckpt.items()}
    bridge = write_gguf(tmp_path / "f32.gguf", tensors, {})
    types = {"blk.0.ffn_gate_up_exps.weight": T.Q4_0, "blk.0.attn_q.weight": T.Q4_0}
    quantized = write_gguf(tmp_path / "q.gguf", tensors, types, gguf.LlamaFileType.MOSTLY_Q4_0)
    faults = HERE.parent.parent / "impl" / "third_party" / "gguf_faults.py"
    faulty = tmp_path / "faulty.gguf"
    made = subprocess.run([sys.executable, str(faults), str(quantized), "experts-unquantized", "--out", str(faulty),
                           "--float", str(bridge)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    before, after = gguf.GGUFReader(str(quantized)), gguf.GGUFReader(str(faulty))
    assert {t.name: t.tensor_type.name for t in after.tensors} == {
        "blk.0.ffn_gate_up_exps.weight": "F16", "blk.0.attn_q.weight": "Q4_0", "blk.0.ffn_gate_inp.weight": "F32"}
    assert int(after.fields["general.file_type"].contents()) == gguf.LlamaFileType.MOSTLY_Q4_0
    same = {t.name: t for t in before.tensors}
    assert all(np.array_equal(same[t.name].data, t.data) for t in after.tensors if "exps" not in t.name)

    def dequantize_file(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SCRIPT), str(case), "--float", str(bridge), "--quantized", str(path),
                               "--out", str(tmp_path / path.stem)], capture_output=True, text=True)

    assert dequantize_file(quantized).returncode == 0
    done = dequantize_file(faulty)
    assert done.returncode == 1
    assert "left unquantized in a quantized file: model.layers.0.experts.gate_up_proj (F16)" in done.stderr, done.stderr
