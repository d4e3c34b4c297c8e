"""Make a tiny random Llama, its tokenizer and an EAGLE-3 draft for it on local disk: no
hub, no download.

    <sglang venv>/bin/python tests/sglang/tiny_model.py OUT_DIR
    # OUT_DIR/llama: the target (LlamaForCausalLM + tokenizer)
    # OUT_DIR/eagle3: a one-layer draft (LlamaForCausalLMEagle3, SGLang's EAGLE-3 format)

The weights are random (seeded), so the text it generates is noise: the tests measure the
server and read its logs, never the text's meaning. A byte-level BPE tokenizer is trained
on a few lines written here, so any text encodes; a chat template makes
/v1/chat/completions work. Runs in the SGLang venv (transformers, tokenizers, torch).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}"
    "\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts several tokens and verifies them in one forward pass.",
    "Explain how a radix cache reuses the prefix of a prompt between requests.",
    "Write a short poem about a server that is fired up and ready to roll.",
    "0123456789 + - * / = ( ) [ ] { } < > , . ; : ! ? ' \" _ # @ $ % ^ & | ~ `",
] * 20


def make(root: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = root / "llama"
    out.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "</s>", "<unk>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id, torch_dtype="bfloat16", tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "sweeper-test-model.json").write_text(json.dumps(
        {"note": "tiny random Llama made by tests/sglang/tiny_model.py for tests only"}))
    make_eagle3(root / "eagle3", config)


def make_eagle3(out: Path, target: Any) -> None:
    """A one-layer EAGLE-3 draft of ``target``: SGLang's llama_eagle3 config and weight
    names (``midlayer.*``, ``fc``, ``d2t``: draft id -> target id offsets, all 0 here)."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    h, i, v = target.hidden_size, target.intermediate_size, target.vocab_size
    kv = target.num_key_value_heads * (h // target.num_attention_heads)
    config = {**{k: getattr(target, k) for k in (
        "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
        "max_position_embeddings", "rms_norm_eps", "vocab_size", "bos_token_id",
        "eos_token_id", "hidden_act")},
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "num_hidden_layers": 1, "draft_vocab_size": v, "target_hidden_size": h,
        "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rope_theta": 10000.0}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    g = torch.Generator().manual_seed(1)

    def rand(*shape: int) -> Any:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    weights = {
        "fc.weight": rand(h, 3 * h),
        "midlayer.hidden_norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "midlayer.input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        "midlayer.post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        "midlayer.self_attn.q_proj.weight": rand(h, 2 * h),
        "midlayer.self_attn.k_proj.weight": rand(kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": rand(kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": rand(h, h),
        "midlayer.mlp.gate_proj.weight": rand(i, h),
        "midlayer.mlp.up_proj.weight": rand(i, h),
        "midlayer.mlp.down_proj.weight": rand(h, i),
        "norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": rand(v, h),
        "d2t": torch.zeros(v, dtype=torch.int64),
        "t2d": torch.ones(v, dtype=torch.bool),
    }
    save_file(weights, str(out / "model.safetensors"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    make(Path(sys.argv[1]))
