#!/usr/bin/env bash
# Makes, here (no GPU), the git-ignored inputs of benchmarks/torchtitan_gpu.sh:
#   corpus/torchtitan (v0.2.2 source), corpus/torchtitan_ext (extra llama3 flavors),
#   corpus/torchtitan_data/c4_synth (generated text), .whl (wheels missing on the GPU machine).
#   bash benchmarks/torchtitan_prepare.sh      # needs the search tool's mirror of pytorch/torchtitan
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd); cd "$ROOT"
GIT_DIR=${TORCHTITAN_MIRROR:-$ROOT/../.mirror/pytorch+torchtitan/repo}
TAG=v0.2.2   # 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce, 2026-02-20: its torch imports all resolve in torch 2.11.0

# 1. the source, less the blobs the mirror lacks or nobody here reads (test images, c4_test, cc12m);
#    git still prints 'invalid object … c4_test/data.json' (the mirror lacks that blob): harmless
rm -rf corpus/torchtitan && mkdir -p corpus/torchtitan
git --git-dir="$GIT_DIR" ls-tree -r --name-only "$TAG" \
  | grep -v -e 'c4_test/data.json' -e 'cc12m-train' -e '\.png$' \
  | xargs git --git-dir="$GIT_DIR" archive "$TAG" -- | tar -x -C corpus/torchtitan

# 2. Llama 3.2 1B / 3B shapes as llama3 flavors (torchtitan's --experimental.custom_import loads it)
mkdir -p corpus/torchtitan_ext
cat > corpus/torchtitan_ext/wb_llama3_flavors.py <<'EOF'
"""Extra Llama-3-family flavors for torchtitan v0.2.2, loaded with torchtitan's own hook
``--experimental.custom_import wb_llama3_flavors`` (torchtitan itself is not edited).

torchtitan v0.2.2 ships llama3 flavors debugmodel/8B/70B/405B only; on one H200 (no FSDP: one
rank means AMP with fp32 master weights + fused AdamW, 16 B/param of state) 8B fits only with
full activation checkpointing. These add the Llama 3.2 shapes (vocab 128256, as the 8B flavor:
torchtitan does not shrink the vocab to the tokenizer's), untied embeddings as torchtitan builds.
"""
from torchtitan.models.llama3 import llama3_args
from torchtitan.models.llama3.model.args import TransformerModelArgs

# Llama 3.2 3B: dim 3072, 28 layers, 24 heads (head 128), 8 KV heads, SwiGLU hidden 8192.
llama3_args.setdefault("3B", TransformerModelArgs(
    dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn_dim_multiplier=1.0, multiple_of=256,
    rope_theta=500000))
# Llama 3.2 1B: dim 2048, 16 layers, 32 heads (head 64), 8 KV heads, SwiGLU hidden 8192.
llama3_args.setdefault("1B", TransformerModelArgs(
    dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.5, multiple_of=256,
    rope_theta=500000))
EOF

# 2b. MoE and tied dense shapes torchtitan ships only at sizes one GPU cannot hold (Qwen3-30B-A3B,
#     DeepSeek-V2-Lite 16B): the same layers, fewer of them, loaded the same way
cat > corpus/torchtitan_ext/wb_moe_flavors.py <<'EOF2'
"""Shorter MoE flavors for torchtitan v0.2.2, loaded with ``--experimental.custom_import wb_moe_flavors``
(torchtitan itself is not edited). Each is a published flavor with fewer layers, so that one GPU
holds its fp32 weights and AdamW state (16 B/param): every layer's shape is the published one.
"""
import dataclasses

from torchtitan.models.deepseek_v3 import deepseekv3_args
from torchtitan.models.qwen3 import qwen3_args

# Qwen3-30B-A3B's layer (dim 2048, 32 heads x head_dim 128 = 4096 != dim, 4 KV heads, 128 experts
# top-8 of width 768, no shared expert, untied) x 6 instead of 48: ~4.4B parameters, ~1.1B active
qwen3_args.setdefault("30B-A3B-6L", dataclasses.replace(qwen3_args["30B-A3B"], n_layers=6, max_seq_len=4096))
# DeepSeek 16B's layers (MLA with kv rank 512, q head 128+64, v 128; 64 experts top-6 of width 1408,
# 2 shared; 1 dense layer of 10944) x 6 instead of 27, with SDPA causal attention (16B asks for
# flex attention with a block-causal mask, compiled on first use): ~3.4B parameters
deepseekv3_args.setdefault("16B-6L", dataclasses.replace(deepseekv3_args["16B"], n_layers=6, attn_type="sdpa",
                                                         attn_mask_type="causal"))
EOF2

# 3. c4_test-layout text (json lines with "text"): Zipf-sampled words of torchtitan's own docs
python3 - <<'EOF'
import json, random, re
from pathlib import Path
words = []
for p in sorted(Path("corpus/torchtitan").rglob("*.md")):
    words += re.findall(r"[A-Za-z][a-z]{1,11}", p.read_text(errors="ignore"))
vocab = sorted(set(w.lower() for w in words))
rng = random.Random(0)
w = [1.0 / (i + 1) for i in range(len(vocab))]
rng.shuffle(vocab)
out = Path("corpus/torchtitan_data/c4_synth"); out.mkdir(parents=True, exist_ok=True)
with (out / "data.json").open("w") as f:
    for i in range(1000):
        n = rng.randint(150, 450)
        ws = rng.choices(vocab, weights=w, k=n)
        sents, j = [], 0
        while j < n:
            k = rng.randint(6, 18); s = " ".join(ws[j:j + k]); j += k
            sents.append(s[:1].upper() + s[1:] + ".")
        f.write(json.dumps({"text": " ".join(sents), "timestamp": "2019-04-25T12:00:00Z", "url": f"synthetic://{i}"}) + "\n")
print(out / "data.json", (out / "data.json").stat().st_size, "bytes")
EOF

# 4. wheels for the GPU machine's Python 3.12 (KINDS.md's list has none of these); extra/: fallbacks
P=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
   --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
mkdir -p .whl/extra
python3 -m pip download -q "${P[@]}" -d .whl datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 torchdata==0.11.0 \
  tyro==1.0.17 typeguard==4.6.1 docstring-parser==0.18.0
python3 -m pip download -q "${P[@]}" -d .whl/extra fsspec==2026.9.0 typing_extensions==4.15.0 datasets==4.8.5
du -sh corpus/torchtitan corpus/torchtitan_ext corpus/torchtitan_data .whl
