#!/usr/bin/env python3
"""Golden fixtures for the Go forward pass, made with Hugging Face transformers.

For each architecture the scorer serves (Qwen3ForCausalLM, Qwen3MoeForCausalLM,
Qwen2MoeForCausalLM) this builds a tiny randomly initialised model from a config
with a fixed seed, saves it as safetensors in f32 and bf16 and, for the MoE
models, in both expert layouts (per-expert tensors as transformers 4.x and the
published checkpoints write them; fused [E, 2I, H] / [E, H, I] tensors as
transformers 5.x holds them), and records the logits of the last position of
real reranker prompts, computed by transformers itself in float64 from exactly
the saved (rounded) weights.

The prompts are tokenized with the real Qwen3 tokenizer, built the way the
official Qwen3-Reranker code builds them (template head + body + template tail,
each encoded separately). So that the fixtures stay small, the vocabulary is
compacted: the model's vocabulary is the sorted set of token ids the prompts use
(plus "yes" and "no"), and compact id i stands for real id vocab_map[i]. That is
a relabelling only; the Go test maps the real ids it tokenizes to compact ids.

Run on a machine with torch, transformers and tokenizers (any device; the
reference runs in float64 on the CPU):

    python3 gen.py --tokenizer path/to/tokenizer.json --out .

Every parameter is drawn from a seeded normal (matrices with std 1/sqrt(fan_in),
norms around 1, biases around 0) rather than transformers' init, whose 0.02 std
makes every logit nearly zero and would let a wrong forward pass pass the test.
"""
import argparse
import json
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer

HEAD = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
TAIL = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QUERY = "how to make cheap espresso at home?"
DOCUMENTS = [
    "A manual lever espresso maker costs less than a pump machine and pulls a fine shot at home.",
    "Café crème, naïve façade: 日本語のテキスト and emoji ☕🙂 mixed with numbers 12,345.67.",
    "Tires",
    "Grind the beans fine, tamp evenly, and keep the water at 92 °C; cheap burr grinders work well enough for a daily shot.",
]

COMMON = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    pad_token_id=None,
    bos_token_id=None,
    eos_token_id=None,
)

ARCHS = {
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, "Qwen3ForCausalLM",
              dict(head_dim=8, tie_word_embeddings=True, attention_bias=False, rope_theta=1000000.0)),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM, "Qwen3MoeForCausalLM",
                  dict(head_dim=8, tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=16, norm_topk_prob=True, decoder_sparse_step=1,
                       mlp_only_layers=[], rope_theta=1000000.0)),
    "qwen2_moe": (transformers.Qwen2MoeConfig, transformers.Qwen2MoeForCausalLM, "Qwen2MoeForCausalLM",
                  dict(tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=16, shared_expert_intermediate_size=24,
                       norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
                       rope_theta=1000000.0)),
}


def eager(model):
    """Plain attention and a per-expert loop: transformers 5 otherwise picks grouped_mm, which
    has no float64 kernel."""
    for fn in ("set_attn_implementation", "set_experts_implementation"):
        f = getattr(model, fn, None)
        if f is not None:
            try:
                f("eager")
            except Exception as e:  # an older transformers without the experts switch
                print(f"{fn}: {e}")
    model.config._attn_implementation = "eager"
    model.config._experts_implementation = "eager"
    return model


def prompts(tok):
    head = tok.encode(HEAD, add_special_tokens=False).ids
    tail = tok.encode(TAIL, add_special_tokens=False).ids
    out = []
    for d in DOCUMENTS:
        body = f"<Instruct>: {INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {d}"
        out.append(head + tok.encode(body, add_special_tokens=False).ids + tail)
    return out


def randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                if "norm" in name:
                    v = 1 + 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64)
                else:
                    v = 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=g, dtype=torch.float64)
            else:
                v = torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(p.shape[-1])
            p.copy_(v.to(p.dtype))


def per_expert(sd, cfg):
    """Per-expert tensors from fused ones (or the state dict as is if already per-expert)."""
    out = {}
    E, I = cfg.num_experts, cfg.moe_intermediate_size
    for k, v in sd.items():
        if k.endswith(".mlp.experts.gate_up_proj"):
            p = k[: -len("gate_up_proj")]
            assert tuple(v.shape) == (E, 2 * I, cfg.hidden_size), (k, v.shape)
            for e in range(E):
                out[f"{p}{e}.gate_proj.weight"] = v[e, :I, :].contiguous()
                out[f"{p}{e}.up_proj.weight"] = v[e, I:, :].contiguous()
        elif k.endswith(".mlp.experts.down_proj"):
            p = k[: -len("down_proj")]
            assert tuple(v.shape) == (E, cfg.hidden_size, I), (k, v.shape)
            for e in range(E):
                out[f"{p}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def fused(sd, cfg):
    """Fused [E, 2I, H] / [E, H, I] expert tensors from per-expert ones."""
    E = cfg.num_experts
    out, done = {}, set()
    for k in sd:
        if ".mlp.experts." in k and k.endswith(".gate_proj.weight"):
            p = k[: k.index(".mlp.experts.") + len(".mlp.experts.")]
            if p in done:
                continue
            done.add(p)
            out[p + "gate_up_proj"] = torch.stack(
                [torch.cat([sd[f"{p}{e}.gate_proj.weight"], sd[f"{p}{e}.up_proj.weight"]], 0) for e in range(E)]).contiguous()
            out[p + "down_proj"] = torch.stack([sd[f"{p}{e}.down_proj.weight"] for e in range(E)]).contiguous()
    for k, v in sd.items():
        if ".mlp.experts." not in k:
            out[k] = v
    return out


def router_gap(model, ids):
    """Smallest gap, over tokens and MoE layers, between the k-th and (k+1)-th router logit: a
    near-tie there could pick other experts in float32 than in float64."""
    gaps = []
    hooks = []
    k = getattr(model.config, "num_experts_per_tok", 0)
    for name, mod in model.named_modules():
        if name.endswith(".mlp.gate") and isinstance(mod, torch.nn.Module):
            def hook(m, inp, out):
                logits = out[0] if isinstance(out, tuple) else out
                if logits.dim() == 2 and logits.shape[-1] == model.config.num_experts:
                    s = torch.sort(logits.double(), dim=-1, descending=True).values
                    gaps.append(float((s[:, k - 1] - s[:, k]).min()))
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    yes, no = tok.token_to_id("yes"), tok.token_to_id("no")
    ps = prompts(tok)
    vocab = sorted(set(i for p in ps for i in p) | {yes, no})
    compact = {r: i for i, r in enumerate(vocab)}
    meta = {
        "generator": f"gen.py with torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {sys.modules['tokenizers'].__version__}",
        "head": HEAD, "tail": TAIL, "instruction": INSTRUCTION, "query": QUERY, "documents": DOCUMENTS,
        "ids": ps, "vocab_map": vocab, "yes_id": yes, "no_id": no,
        "models": [],
    }
    torch.set_grad_enabled(False)
    for seed, (arch, (cfg_cls, model_cls, arch_name, extra)) in enumerate(ARCHS.items(), start=1):
        cfg = cfg_cls(vocab_size=len(vocab), **COMMON, **extra)
        cfg.architectures = [arch_name]
        torch.manual_seed(seed)
        model = eager(model_cls(cfg).to(torch.float64))
        randomise(model, seed)
        sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if cfg.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        base = per_expert(sd, cfg) if getattr(cfg, "num_experts", 0) else sd
        layouts = ["per_expert", "fused"] if getattr(cfg, "num_experts", 0) else ["dense"]
        for dtype in ["f32", "bf16"]:
            tdt = torch.float32 if dtype == "f32" else torch.bfloat16
            rounded = {k: v.to(tdt) for k, v in base.items()}
            # The reference runs on exactly the saved values, widened to float64.
            ref = eager(model_cls(cfg).to(torch.float64))
            wide = {k: v.to(torch.float64) for k, v in rounded.items()}
            load = fused(wide, cfg) if getattr(cfg, "num_experts", 0) and any(k.endswith("gate_up_proj") for k in ref.state_dict()) else wide
            missing, unexpected = ref.load_state_dict(load, strict=False)
            missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
            assert not missing and not unexpected, (missing, unexpected)
            if cfg.tie_word_embeddings:
                ref.tie_weights()
            ref.eval()
            logits64, logits32 = [], []
            r32 = eager(model_cls(cfg).to(torch.float32))
            r32.load_state_dict({k: v.to(torch.float32) for k, v in load.items()}, strict=False)
            if cfg.tie_word_embeddings:
                r32.tie_weights()
            r32.eval()
            for p in ps:
                ids = torch.tensor([[compact[i] for i in p]])
                logits64.append(ref(input_ids=ids).logits[0, -1].tolist())
                logits32.append(r32(input_ids=ids).logits[0, -1].double().tolist())
            gap = router_gap(ref, [compact[i] for i in ps[0]]) if getattr(cfg, "num_experts", 0) else None
            maxdiff = max(abs(x - y) for a_, b_ in zip(logits64, logits32) for x, y in zip(a_, b_))
            for layout in layouts:
                name = f"{arch}-{dtype}-{layout}"
                d = os.path.join(a.out, name)
                os.makedirs(d, exist_ok=True)
                tensors = fused(rounded, cfg) if layout == "fused" else rounded
                save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
                cfg.save_pretrained(d)
                meta["models"].append({
                    "dir": name, "arch": arch_name, "dtype": dtype, "layout": layout,
                    "logits_f64": logits64, "hf_f32_max_abs_diff": maxdiff, "min_router_gap": gap,
                })
                print(f"{name}: {len(tensors)} tensors, hf f32 vs f64 max |diff| {maxdiff:.3g}, router gap {gap}, "
                      f"yes-no logit per prompt {[round(l[compact[yes]] - l[compact[no]], 4) for l in logits64]}")
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
