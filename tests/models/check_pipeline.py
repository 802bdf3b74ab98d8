#!/usr/bin/python3
"""Checks the "cpu" pass pipeline on the exported torchvision models: the optimised graph (fused ops,
folded BatchNorm, ...) run by the reference interpreter must compute what the original ONNX model computes.

For each model: `tessel opt M.onnx --pipeline cpu --verify-each -o M.cpu.tir`, then `tessel run` on the
.tir and on the .onnx with the same input; max |optimised - original| <= 1e-4 * max |original|. Prints the
number of top-level nodes before and after the pipeline. Exit status 1 when any model fails.

With --transformer the script also exports a small pre-norm transformer block (LayerNorm, 2-head attention,
Erf GELU MLP; opset 13, random weights, as torch.onnx.export writes it) and checks the same way, plus that
fuse-transformer-patterns recognised its 2 LayerNorms, its attention and its GELU."""
import functools
import os
import re
import sys
import tempfile

import numpy as np

from model_check_common import inputs_ready, model_arg_parser, run_command
# Relative to the largest |original output|: folding BatchNorm into weights and re-associating sums
# changes float32 rounding by far less than this.
RELATIVE_TOLERANCE = 1e-4
TIMEOUT_SECONDS = 900
# A node of the main graph in text IR: two-space indent, results, '=', an op name and '('. Constants
# ("const %w ...") and the nodes of nested bodies (deeper indent) do not match.
NODE_LINE = re.compile(r"^  %[^=]*= [A-Za-z_][\w.]*\(")


run = functools.partial(run_command, timeout=TIMEOUT_SECONDS)


def count_nodes(tir_path):
    """Number of nodes in the main graph of a text-IR file (nodes inside fused bodies are not counted)."""
    with open(tir_path, encoding="utf-8") as f:
        return sum(1 for line in f if NODE_LINE.match(line))


def run_model(tessel, model, input_path, output_dir):
    """`tessel run` with the one input; returns (output array or None, seconds, error message)."""
    os.makedirs(output_dir, exist_ok=True)
    ok, seconds, message = run([tessel, "run", model, "--input", f"input={input_path}", "--output-dir", output_dir])
    if not ok:
        return None, seconds, f"tessel run {os.path.basename(model)}: {message}"
    produced = os.path.join(output_dir, "output.npy")
    if not os.path.exists(produced):
        return None, seconds, f"tessel run {os.path.basename(model)} wrote no output.npy"
    return np.load(produced), seconds, ""


def export_transformer_block(out_dir):
    """Writes transformer_block.onnx and .input.npy to out_dir (imports torch only when asked for)."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self, width=16, heads=2):
            super().__init__()
            self.heads, self.width = heads, width
            self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
            self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.fc1, self.fc2 = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
            with torch.no_grad():  # non-trivial affine parameters, so eliminate-identity cannot remove them
                for ln in (self.ln1, self.ln2):
                    ln.weight.uniform_(0.5, 1.5)
                    ln.bias.uniform_(-0.5, 0.5)

        def forward(self, x):
            batch, tokens, width = x.shape
            head = width // self.heads

            def split(t):
                return t.reshape(batch, tokens, self.heads, head).transpose(1, 2)

            q, k, v = (split(t) for t in self.qkv(self.ln1(x)).split(width, dim=-1))
            attention = torch.softmax(q @ k.transpose(-2, -1) / head ** 0.5, dim=-1) @ v
            x = x + self.proj(attention.transpose(1, 2).reshape(batch, tokens, width))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    torch.manual_seed(0)
    example = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(1))
    torch.onnx.export(Block().eval(), example, os.path.join(out_dir, "transformer_block.onnx"), opset_version=13,
                      input_names=["input"], output_names=["output"], do_constant_folding=True)
    np.save(os.path.join(out_dir, "transformer_block.input.npy"), example.numpy())


def export_tiny_bert(out_dir):
    """Writes tiny_bert.onnx (int64 token ids and padding mask in, float logits out: an embedding Gather,
    learned positions, 2 torch.nn.TransformerEncoder layers with a key padding mask, a classifier on the
    first token), ids.npy, mask.npy (the last 4 of 16 tokens padding) and the PyTorch logits.npy."""
    import torch

    class TinyBert(torch.nn.Module):
        def __init__(self, vocab=100, width=32, heads=4, layers=2, tokens=16):
            super().__init__()
            self.tok = torch.nn.Embedding(vocab, width)
            self.pos = torch.nn.Parameter(torch.randn(1, tokens, width) * 0.02)
            layer = torch.nn.TransformerEncoderLayer(width, heads, dim_feedforward=64, batch_first=True,
                                                     activation="gelu")
            self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = torch.nn.Linear(width, 2)

        def forward(self, ids, mask):
            h = self.enc(self.tok(ids) + self.pos, src_key_padding_mask=(mask == 0))
            return self.head(h[:, 0])

    torch.manual_seed(0)
    model = TinyBert().eval()
    ids = torch.randint(0, 100, (1, 16), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, 12:] = 0
    torch.onnx.export(model, (ids, mask), os.path.join(out_dir, "tiny_bert.onnx"), opset_version=14,
                      input_names=["ids", "mask"], output_names=["logits"])
    np.save(os.path.join(out_dir, "ids.npy"), ids.numpy())
    np.save(os.path.join(out_dir, "mask.npy"), mask.numpy())
    with torch.no_grad():
        np.save(os.path.join(out_dir, "logits.npy"), model(ids, mask).numpy())


# What fuse-transformer-patterns must leave in the block: a pattern of the .tir text -> least count (the
# Gelu may be a node or, after fc1, the FusedGemm epilogue's activation).
TRANSFORMER_FUSIONS = {r"= LayerNormalization\(": 2, r"= tessel\.Attention\(": 1, r"= Gelu\(|activation=\"Gelu\"": 1}


def check_transformer_fusions(cpu_tir):
    """Error message when the optimised block lacks an expected fused op (fused bodies count too)."""
    with open(cpu_tir, encoding="utf-8") as f:
        text = f.read()
    for pattern, least in TRANSFORMER_FUSIONS.items():
        found = len(re.findall(pattern, text))
        if found < least:
            return f"expected >= {least} matches of /{pattern}/ after the cpu pipeline, found {found}"
    return None


def check_model(name, models_dir, tessel, work):
    """Optimises and runs one model; returns an error message or None."""
    onnx_path = os.path.join(models_dir, f"{name}.onnx")
    input_path = os.path.join(models_dir, f"{name}.input.npy")
    plain_tir = os.path.join(work, f"{name}.tir")
    cpu_tir = os.path.join(work, f"{name}.cpu.tir")
    ok, _, message = run([tessel, "ir", onnx_path, "-o", plain_tir])
    if not ok:
        return f"tessel ir: {message}"
    ok, opt_seconds, message = run([tessel, "opt", onnx_path, "--pipeline", "cpu", "--verify-each", "-o", cpu_tir])
    if not ok:
        return f"tessel opt --pipeline cpu: {message}"
    before, after = count_nodes(plain_tir), count_nodes(cpu_tir)
    expected, seconds_a, message = run_model(tessel, onnx_path, input_path, os.path.join(work, f"{name}.out-onnx"))
    if message:
        return message
    actual, seconds_b, message = run_model(tessel, cpu_tir, input_path, os.path.join(work, f"{name}.out-cpu"))
    if message:
        return message
    if actual.shape != expected.shape:
        return f"optimised output shape {actual.shape}, original {expected.shape}"
    scale = float(np.abs(expected).max())
    finite = np.all(np.isfinite(actual))
    error = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max()) if finite else np.inf
    limit = RELATIVE_TOLERANCE * scale
    verdict = "ok" if error <= limit else "TOO LARGE"
    print(f"{name}: nodes {before} -> {after}; opt {opt_seconds:.2f} s, run {seconds_a:.2f} s (onnx) / "
          f"{seconds_b:.2f} s (cpu.tir); max|cpu - onnx| = {error:.3g} (relative {error / max(scale, 1e-30):.3g}, "
          f"limit {limit:.3g}) {verdict}", flush=True)
    if verdict != "ok":
        return f"max error {error:.3g} exceeds {RELATIVE_TOLERANCE:g} * max|original| = {limit:.3g}"
    if after >= before:
        return f"the cpu pipeline did not reduce the node count ({before} -> {after})"
    if name == "transformer_block":
        return check_transformer_fusions(cpu_tir)
    return None


def main():
    parser = model_arg_parser(__doc__, "keep the .tir files and outputs in this directory")
    parser.add_argument("--transformer", action="store_true",
                        help="also export and check a small transformer block (needs torch)")
    args = parser.parse_args()
    if not inputs_ready(args, ".input.npy"):
        return 2
    failures = []
    with tempfile.TemporaryDirectory(prefix="tessel-pipeline-") as scratch:
        work = args.keep or scratch
        os.makedirs(work, exist_ok=True)
        checks = [(name, args.models) for name in args.only]
        if args.transformer:
            export_transformer_block(work)
            checks.append(("transformer_block", work))
        for name, directory in checks:
            error = check_model(name, directory, os.path.abspath(args.tessel), work)
            if error:
                print(f"FAIL {name}: {error}", flush=True)
                failures.append(name)
    print(f"{len(checks) - len(failures)} of {len(checks)} models ok through the cpu pipeline")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
