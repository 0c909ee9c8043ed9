#!/usr/bin/env python3
"""Train a randomly initialised Llama (Llama-2-7B dimensions, fewer layers) with eager, torch SDPA
or flashtrain attention, and report speed, memory and numerical stability.

Nothing is downloaded: the model is built from a LlamaConfig written here (hidden 4096, 32 heads,
intermediate 11008, vocab 32000, --layers of them; --kv-heads for GQA), and the data is a
deterministic synthetic token stream made from --data-seed (see TokenStream), the same for every
attention, dtype and sequence length.

Precision (what a user of the Hugging Face Trainer or Lightning gets with bf16/fp16 "mixed"):
fp32 master weights, AdamW state and gradients; the forward and backward run under torch.autocast
in --dtype. fp16 adds a torch GradScaler (dynamic loss scaling; its first steps may overflow and
be skipped while it finds the scale, which is counted as non-finite steps). --pure-bf16 instead keeps
weights, gradients and optimizer state in bf16 (no autocast): less memory, slightly faster, less
accurate. A step with a non-finite loss or gradient norm is counted and its update is skipped.

Each optimizer step consumes --tokens-per-step tokens (at least one sequence): micro-batches of
--micro-batch sequences (default: the whole step in one micro-batch) with gradient accumulation.
Gradients are clipped to norm 1.0; AdamW (fused on CUDA) with linear warm-up and cosine decay.

Logged per step: loss, gradient norm, tokens/s, MFU, peak memory, non-finite steps. MFU counts
model FLOPs only (no activation-checkpointing recompute): 6 * (parameters of every matmul,
lm_head included, embedding lookup excluded) per token, plus causal attention 6 * layers * S *
heads * head_dim per token (the 12*L*S*d of PaLM's appendix halved for the causal mask), against
the H200 SXM dense bf16/fp16 peak of 989 TFLOP/s (--peak-tflops to change it).

Examples:
    python examples/train_llama.py --attn flashtrain --seq 8192 --steps 20
    python examples/train_llama.py --attn sdpa --dtype fp16 --checkpoint full --seq 4096
    python examples/train_llama.py --attn flashtrain --seq 2048,4096,8192 --json out.json
    python examples/train_llama.py --compare sdpa,flashtrain --seq 4096,8192 --steps 14 --json out.json
    python examples/train_llama.py --tiny --device cpu --steps 2 --attn sdpa   # smoke test

With --seq given a list, the sequence lengths run one after another in this process (a fresh model
and optimizer each); after an out-of-memory result the longer ones are reported as "oom-skipped".
Out of memory is a result ("status": "oom"), not a crash; the exit status is 0 unless a run failed
with another error (1).

--compare A,B[,...] measures speed as same-process ratios: for each S one model and optimizer, and
--steps rounds in which every listed attention runs one optimizer step (the live model's attention
switched in between; the same kind of batch, the stream goes on), in the listed order in even
rounds and reversed in odd ones (ABBA), so drifts of clock, temperature or allocator state fall on
both alike. The first --warmup-steps rounds are not measured. Per attention: per-step times and
peak memory (reset before each step: weights and optimizer state are shared, so it is that
attention's step peak), tokens/s as tokens per step / the median measured step time, non-finite
steps. "paired" gives each attention after the first its tokens/s ratio to the first's: the median
over measured rounds (both steps finite) of that round's ratio, with min, max and the round count.
An attention that runs out of memory is recorded as "oom" and left out from then on (longer S:
"oom-skipped"); the others go on. "sdpa_backend" is the backend torch's SDPA picks for these shapes.

flashtrain: the extension must be loadable (`pip install .`, or FLASHTRAIN_TORCH_LIBRARY=<built
libflashtrain_torch.so> with PYTHONPATH=python); this script adds the checkout's python/ to the path.
"""
import argparse
import contextlib
import gc
import json
import math
import os
import platform
import statistics
import sys
import time

H200_DENSE_PEAK_TFLOPS = 989.0  # H200 SXM, bf16/fp16 dense tensor-core peak
LLAMA2_7B = dict(hidden=4096, heads=32, intermediate=11008, vocab=32000)
TINY = dict(hidden=256, heads=4, intermediate=512, vocab=512, layers=2, seq="128",
            tokens_per_step=512)
# A run is not started when less than this remains before --deadline (model build + a few steps).
DEADLINE_MARGIN_S = 8.0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATTNS = ["eager", "sdpa", "flashtrain"]


def _seq_list(text):
    try:
        seqs = [int(s.strip().lower().replace("k", "")) * (1024 if s.strip().lower().endswith("k")
                                                          else 1) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("--seq takes integers like 2048 or 2k, comma-separated")
    if not seqs or min(seqs) < 2:
        raise argparse.ArgumentTypeError("--seq needs lengths >= 2")
    return seqs


def _attn_list(text):
    names = [a.strip() for a in text.split(",") if a.strip()]
    if len(names) < 2 or len(set(names)) < len(names) or not set(names) <= set(ATTNS):
        raise argparse.ArgumentTypeError("--compare takes two or more different attentions of %s, "
                                         "comma-separated" % ",".join(ATTNS))
    return names


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring (head of this file) for precision, data and MFU details.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    m = p.add_argument_group("model (Llama-2-7B dimensions unless overridden)")
    m.add_argument("--layers", type=int, default=None, help="decoder layers (default 4; 2 with --tiny)")
    m.add_argument("--hidden", type=int, default=None, help="hidden size (default 4096)")
    m.add_argument("--heads", type=int, default=None, help="query heads (default 32)")
    m.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA); default = --heads")
    m.add_argument("--intermediate", type=int, default=None, help="MLP size (default 11008)")
    m.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 32000)")
    m.add_argument("--tiny", action="store_true",
                   help="tiny dims for a CPU smoke test: hidden 256, 4 heads (head dim 64), "
                        "intermediate 512, vocab 512, 2 layers, seq 128, 512 tokens/step "
                        "(explicit flags still override)")
    t = p.add_argument_group("training")
    t.add_argument("--attn", choices=ATTNS, default="flashtrain")
    t.add_argument("--compare", type=_attn_list, default=None, metavar="ATTN,ATTN[,...]",
                   help="paired speed measurement instead of --attn: one model and optimizer per S, "
                        "--steps rounds of one optimizer step per listed attention (ABBA order), "
                        "ratios to the first one's tokens/s (see the module docstring)")
    t.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                   help="autocast dtype (fp32 master weights); fp16 adds a GradScaler; fp32 = no autocast")
    t.add_argument("--pure-bf16", action="store_true",
                   help="with --dtype bf16: bf16 weights, grads and AdamW state, no autocast")
    t.add_argument("--seq", type=_seq_list, default=None,
                   help="sequence length, or a comma-separated list run one after another (default 2048)")
    t.add_argument("--tokens-per-step", type=int, default=None,
                   help="tokens per optimizer step, reached by gradient accumulation (default 16384)")
    t.add_argument("--micro-batch", type=int, default=None,
                   help="sequences per forward/backward (default: tokens-per-step // seq, at least 1)")
    t.add_argument("--steps", type=int, default=10,
                   help="optimizer steps (with --compare: rounds, one step per attention each)")
    t.add_argument("--warmup-steps", type=int, default=None,
                   help="first steps (--compare: rounds) left out of the tokens/s and MFU summary "
                        "(default min(2, steps-1))")
    t.add_argument("--checkpoint", choices=["none", "full", "flashtrain-policy"], default="none",
                   help="activation checkpointing of every decoder layer: full recompute, or "
                        "flashtrain.checkpoint.policy() (save attention outputs, recompute the rest; "
                        "needs --attn flashtrain and torch >= 2.4)")
    t.add_argument("--lr", type=float, default=3e-4)
    t.add_argument("--lr-warmup-steps", type=int, default=None,
                   help="linear learning-rate warm-up (default: 10%% of --steps, at most 100)")
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping")
    t.add_argument("--seed", type=int, default=0, help="model initialisation seed")
    t.add_argument("--data-seed", type=int, default=1234, help="synthetic token stream seed")
    t.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="write the summary JSON here ('-' for stdout)")
    o.add_argument("--jsonl", metavar="PATH",
                   help="append one JSON line per sequence length as soon as it finishes")
    o.add_argument("--log-every", type=int, default=1, help="print a log line every N steps (0: none)")
    o.add_argument("--no-progress", action="store_true",
                   help="no progress bar (--compare has none: it logs every round)")
    o.add_argument("--max-seconds", type=float, default=None,
                   help="stop a run's training loop after this long (result marked stopped_early)")
    o.add_argument("--deadline", type=float, default=None,
                   help="absolute time.time(): sequence lengths not started %d s before it are "
                        "'skipped-budget', a running one stops early" % DEADLINE_MARGIN_S)
    o.add_argument("--peak-tflops", type=float, default=H200_DENSE_PEAK_TFLOPS,
                   help="peak for MFU (H200 SXM dense bf16/fp16)")
    args = p.parse_args(argv)

    tiny = TINY if args.tiny else {}
    for name, default in dict(LLAMA2_7B, layers=4).items():
        if getattr(args, name) is None:
            setattr(args, name, tiny.get(name, default))
    if args.seq is None:
        args.seq = _seq_list(tiny.get("seq", "2048"))
    if args.tokens_per_step is None:
        args.tokens_per_step = tiny.get("tokens_per_step", 16384)
    if args.kv_heads is None:
        args.kv_heads = args.heads
    if args.hidden % args.heads or args.heads % args.kv_heads:
        p.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    if args.compare:
        args.attn = ",".join(args.compare)  # what the result records and log lines call the run
    if args.checkpoint == "flashtrain-policy" and args.attn != "flashtrain":
        p.error("--checkpoint flashtrain-policy saves flashtrain attention outputs; with %s "
                "attention it would be full checkpointing (use --checkpoint full)" % args.attn)
    if args.pure_bf16 and args.dtype != "bf16":
        p.error("--pure-bf16 needs --dtype bf16")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.warmup_steps is None:
        args.warmup_steps = min(2, args.steps - 1)
    args.warmup_steps = max(0, min(args.warmup_steps, args.steps - 1))
    if args.lr_warmup_steps is None:
        args.lr_warmup_steps = min(100, max(1, args.steps // 10))
    return args


# ----------------------------------------------------------------------------------------------
# Data


class TokenStream:
    """A deterministic, learnable synthetic token stream (no network, no tokenizer).

    Text-like structure at two ranges, so the loss falls from ln(vocab) and attention matters:
    - words: a fixed lexicon of 8192 random token strings (1-6 tokens, drawn from the whole
      vocabulary), sampled with a Zipf law; within a word the next token is determined;
    - documents of 1024 tokens made of 128-token blocks, each block after the first a copy of an
      earlier block of the same document with probability 0.3 (induction / copying).
    The stream is consumed in order, so step k sees the same tokens whatever the sequence length,
    attention or dtype; rows of a micro-batch are consecutive windows of it.
    """

    WORDS, DOC, BLOCK, COPY_P = 8192, 1024, 128, 0.3

    def __init__(self, vocab, seed):
        import torch
        self.torch = torch
        self.gen = torch.Generator().manual_seed(seed)
        g = self.gen
        self.lengths = torch.randint(1, 7, (self.WORDS,), generator=g)
        self.starts = torch.cumsum(self.lengths, 0) - self.lengths
        self.lexicon = torch.randint(0, vocab, (int(self.lengths.sum()),), generator=g)
        self.weights = 1.0 / torch.arange(1, self.WORDS + 1, dtype=torch.float64) ** 1.1
        self.buffer = torch.empty(0, dtype=torch.long)

    def _document_batch(self, docs):
        torch, g = self.torch, self.gen
        need = docs * self.DOC
        words = torch.multinomial(self.weights, need, replacement=True, generator=g)
        lens = self.lengths[words]
        firsts = torch.repeat_interleave(self.starts[words], lens)
        offsets = torch.arange(int(lens.sum())) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
        stream = self.lexicon[firsts + offsets][:need].view(docs, self.DOC // self.BLOCK, self.BLOCK)
        for b in range(1, self.DOC // self.BLOCK):
            copy = torch.rand(docs, generator=g) < self.COPY_P
            src = (torch.rand(docs, generator=g) * b).long()
            rows = torch.nonzero(copy).flatten()
            stream[rows, b] = stream[rows, src[rows]]
        return stream.reshape(-1)

    def take(self, rows, seq):
        n = rows * seq
        if self.buffer.numel() < n:
            docs = (n - self.buffer.numel()) // self.DOC + 1
            self.buffer = self.torch.cat([self.buffer, self._document_batch(docs)])
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out.view(rows, seq)


# ----------------------------------------------------------------------------------------------
# Model, attention, FLOPs


def _flashtrain_autocast_shim(attention_forward):
    """flashtrain's transformers attention takes q, k, v as they come. Under torch.autocast with
    fp32 weights Llama's RoPE promotes q and k to fp32 while v is in the autocast dtype, and
    flashtrain rejects the mix (transformers' own flash-attention path casts to the autocast
    dtype first). Cast the same way here; it is a no-op when the dtypes already match."""

    def forward(module, query, key, value, *args, **kwargs):
        device = query.device.type
        if _autocast_enabled(device):
            dtype = _autocast_dtype(device)
            query, key, value = (t.to(dtype) for t in (query, key, value))
        return attention_forward(module, query, key, value, *args, **kwargs)

    forward.__doc__ = attention_forward.__doc__
    forward.__wrapped__ = attention_forward
    return forward


def _autocast_enabled(device):
    import torch
    try:
        return torch.is_autocast_enabled(device)
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()


def _autocast_dtype(device):
    import torch
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype(device)
    return torch.get_autocast_cpu_dtype() if device == "cpu" else torch.get_autocast_gpu_dtype()


def setup_attention(attn):
    """The attn_implementation name for transformers; registers flashtrain when asked."""
    if attn != "flashtrain":
        return attn
    python_dir = os.path.join(REPO, "python")
    if os.path.isdir(os.path.join(python_dir, "flashtrain")) and python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    import flashtrain.integrations.transformers as ft_hf
    from transformers import AttentionInterface

    name = ft_hf.register()
    AttentionInterface.register(name, _flashtrain_autocast_shim(ft_hf.attention_forward))
    return name


def llama_config(args, seq):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=max(4096, seq),
        rms_norm_eps=1e-5, rope_theta=10000.0, attention_dropout=0.0, tie_word_embeddings=False,
        use_cache=False)


def matmul_params(args):
    head_dim = args.hidden // args.heads
    q_o = 2 * args.hidden * args.heads * head_dim
    k_v = 2 * args.hidden * args.kv_heads * head_dim
    mlp = 3 * args.hidden * args.intermediate
    return args.layers * (q_o + k_v + mlp) + args.hidden * args.vocab  # + lm_head


def flops_per_token(args, seq):
    """Model FLOPs per trained token: 6 * matmul parameters + causal attention 6 * L * S * H * D."""
    return 6 * matmul_params(args) + 6 * args.layers * seq * args.hidden


def build_model(args, impl, seq, device, torch):
    from transformers import LlamaForCausalLM
    config = llama_config(args, seq)
    torch.manual_seed(args.seed)
    ctx = torch.device(device) if hasattr(torch.device(device), "__enter__") else contextlib.nullcontext()
    with ctx:
        model = LlamaForCausalLM._from_config(config, attn_implementation=impl)
    model.to(device)
    if args.pure_bf16:
        model.to(torch.bfloat16)
    if args.checkpoint != "none":
        kwargs = {"use_reentrant": False}
        if args.checkpoint == "flashtrain-policy":
            import flashtrain.checkpoint
            kwargs["context_fn"] = flashtrain.checkpoint.policy()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.train()
    return model


def make_optimizer(model, args, device, torch):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs), "fused"
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kwargs), "default"


def make_scaler(args, device, torch):
    if args.dtype != "fp16":
        return None
    try:
        return torch.amp.GradScaler(device)
    except (AttributeError, TypeError, RuntimeError):
        if device == "cuda":
            return torch.cuda.amp.GradScaler()
        print("train_llama: no GradScaler for %s in torch %s; fp16 runs unscaled"
              % (device, torch.__version__), file=sys.stderr)
        return None


def lr_at(step, args):
    if step < args.lr_warmup_steps:
        return args.lr * (step + 1) / args.lr_warmup_steps
    progress = (step - args.lr_warmup_steps) / max(1, args.steps - args.lr_warmup_steps)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


# ----------------------------------------------------------------------------------------------
# Progress and environment


class _SimpleBar:
    def __init__(self, total, desc):
        self.total, self.desc, self.n, self.tty = total, desc, 0, sys.stderr.isatty()
        self.postfix = ""

    def update(self, n=1):
        self.n += n
        if self.tty:
            filled = int(30 * self.n / max(1, self.total))
            sys.stderr.write("\r%s [%s%s] %d/%d %s" % (self.desc, "#" * filled, "." * (30 - filled),
                                                       self.n, self.total, self.postfix))
            sys.stderr.flush()

    def set_postfix_str(self, text):
        self.postfix = text

    def write(self, text):
        if self.tty:
            sys.stderr.write("\r\033[K")
        print(text, flush=True)

    def close(self):
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def progress_bar(total, desc, disable):
    if disable:
        return None
    try:
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, dynamic_ncols=True, leave=False, file=sys.stderr,
                    disable=None)  # None: off when stderr is not a terminal
    except ImportError:
        return _SimpleBar(total, desc)


def environment(torch, device):
    env = {"python": platform.python_version(), "torch": torch.__version__, "device": device,
           "hostname": platform.node()}
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2 ** 30, 1)
        env["cuda"] = torch.version.cuda
    env["flashtrain_library"] = os.environ.get("FLASHTRAIN_TORCH_LIBRARY")
    return env


def _is_oom(exc, torch):
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return "out of memory" in str(exc).lower()  # also a workspace allocation inside an op


def _gib(nbytes):
    return None if nbytes is None else round(nbytes / 2 ** 30, 3)


# ----------------------------------------------------------------------------------------------
# Training


def _new_result(args, seq):
    micro = args.micro_batch or max(1, args.tokens_per_step // seq)
    accum = max(1, -(-args.tokens_per_step // (micro * seq)))
    return {
        "attn": args.attn, "dtype": args.dtype + ("-pure" if args.pure_bf16 else ""),
        "checkpoint": args.checkpoint, "seq": seq, "layers": args.layers, "hidden": args.hidden,
        "heads": args.heads, "kv_heads": args.kv_heads, "intermediate": args.intermediate,
        "vocab": args.vocab, "micro_batch": micro, "grad_accum": accum,
        "tokens_per_step": micro * seq * accum, "flops_per_token": flops_per_token(args, seq),
        "peak_tflops": args.peak_tflops, "status": "running",
    }


def _step_counters():
    return {"steps": [], "nonfinite_steps": 0, "nonfinite_loss_steps": 0, "nonfinite_grad_steps": 0}


def _prepare(args, impl, seq, device, torch, result):
    """Builds the model, optimizer and GradScaler of the run `result` describes (see _new_result).
    Returns them with run_step(res, step): one optimizer step at lr_at(step), timed, appended to
    res["steps"] and counted in res's non-finite counters; it returns the step's record."""
    model = build_model(args, impl, seq, device, torch)
    result["parameters"] = sum(p.numel() for p in model.parameters())
    result["matmul_parameters"] = matmul_params(args)
    optimizer, result["optimizer"] = make_optimizer(model, args, device, torch)
    scaler = make_scaler(args, device, torch)
    params = [p for p in model.parameters() if p.requires_grad]
    stream = TokenStream(args.vocab, args.data_seed)
    amp_dtype = None if args.pure_bf16 or args.dtype == "fp32" else _run_dtype(args, torch)
    autocast = (lambda: torch.autocast(device, dtype=amp_dtype)) if amp_dtype is not None \
        else contextlib.nullcontext
    micro, accum, tokens = result["micro_batch"], result["grad_accum"], result["tokens_per_step"]
    cuda = device == "cuda"

    def run_step(res, step):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device, dtype=torch.float32)
        for _ in range(accum):
            ids = stream.take(micro, seq).to(device, non_blocking=True)
            with autocast():
                out = model(input_ids=ids, labels=ids, use_cache=False)
            loss = out.loss.float() / accum
            del out
            (scaler.scale(loss) if scaler is not None else loss).backward()
            loss_sum += loss.detach()
        if scaler is not None:
            scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, args.clip)
        finite_grad = bool(torch.isfinite(grad_norm))
        if scaler is not None:
            scale = scaler.get_scale()
            scaler.step(optimizer)  # skips the update itself when a gradient is inf/nan
            scaler.update()
        elif finite_grad:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = float(loss_sum)
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        finite_loss = math.isfinite(loss_value)
        res["nonfinite_loss_steps"] += not finite_loss
        res["nonfinite_grad_steps"] += not finite_grad
        res["nonfinite_steps"] += not (finite_loss and finite_grad)
        tps = tokens / dt
        rec = {"step": step, "loss": loss_value if finite_loss else str(loss_value),
               "grad_norm": float(grad_norm) if finite_grad else str(float(grad_norm)),
               "lr": lr_at(step, args), "time_s": round(dt, 4), "tokens_per_s": round(tps, 1),
               "mfu": round(result["flops_per_token"] * tps / (args.peak_tflops * 1e12), 4)}
        if scaler is not None:
            rec["loss_scale"] = scale
        if cuda:
            rec["peak_mem_gib"] = _gib(torch.cuda.max_memory_allocated())
        res["steps"].append(rec)
        return rec

    return model, optimizer, scaler, run_step


def _run_dtype(args, torch):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]


def _banner(args, seq, result):
    autocast = args.dtype in ("bf16", "fp16") and not args.pure_bf16
    return ("train_llama: %s attention, %s%s, checkpoint %s, S=%d, %d layers, %.2fB parameters, "
            "%d x %d tokens x %d accumulation = %d tokens/step, %.2f GFLOP/token"
            % (args.attn, args.dtype, " (pure)" if args.pure_bf16 else " autocast" if autocast
               else "", args.checkpoint, seq, args.layers, result["parameters"] / 1e9,
               result["micro_batch"], seq, result["grad_accum"], result["tokens_per_step"],
               result["flops_per_token"] / 1e9))


def _out_of_time(args, loop_start):
    return ((args.max_seconds is not None and time.time() - loop_start > args.max_seconds)
            or (args.deadline is not None and time.time() > args.deadline))


def _record_failure(result, exc, torch):
    if _is_oom(exc, torch):
        result["status"] = "oom"
        result["error"] = str(exc).split("\n")[0][:400]
    else:
        import traceback
        result["status"] = "error"
        result["error"] = "%s: %s" % (type(exc).__name__, str(exc)[:2000])
        result["traceback"] = traceback.format_exc()[-4000:]


def train_one(args, seq, impl, device, torch, log):
    """One run at sequence length `seq`; returns its result dict (status ok/oom/error/...)."""
    result = _new_result(args, seq)
    result.update(_step_counters())
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = optimizer = scaler = run_step = None
    t_start = time.time()
    bar = None
    try:
        model, optimizer, scaler, run_step = _prepare(args, impl, seq, device, torch, result)
        bar = progress_bar(args.steps, "%s %s S=%d" % (args.attn, args.dtype, seq), args.no_progress)
        say = bar.write if bar is not None and hasattr(bar, "write") else log
        say(_banner(args, seq, result))
        loop_start = time.time()
        for step in range(args.steps):
            if step > 0 and _out_of_time(args, loop_start):
                result["stopped_early"] = True
                say("train_llama: stopping after %d steps (time limit)" % step)
                break
            rec = run_step(result, step)
            line = "step %d/%d loss %.4f gnorm %.3g %.0f tok/s MFU %.1f%%%s nonfinite %d" % (
                step + 1, args.steps, float(rec["loss"]), float(rec["grad_norm"]), rec["tokens_per_s"],
                100 * rec["mfu"], " mem %.1f GiB" % rec["peak_mem_gib"] if cuda else "",
                result["nonfinite_steps"])
            if bar is not None:
                bar.set_postfix_str("loss %.3f %.0f tok/s" % (float(rec["loss"]), rec["tokens_per_s"]))
                bar.update(1)
            if args.log_every and ((step + 1) % args.log_every == 0 or step + 1 == args.steps):
                say(line)
        result["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - every failure becomes a result
        _record_failure(result, exc, torch)
    finally:
        if bar is not None:
            bar.close()
    result["wall_s"] = round(time.time() - t_start, 2)
    if cuda:
        result["peak_mem_gib"] = _gib(torch.cuda.max_memory_allocated())
        result["peak_reserved_gib"] = _gib(torch.cuda.max_memory_reserved())
    del model, optimizer, scaler, run_step
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    _summarise(result, args)
    return result


# ----------------------------------------------------------------------------------------------
# Paired comparison (--compare)


def set_attention(model, impl):
    """Switches a built model's attention implementation; transformers >= 4.48 looks it up in
    config._attn_implementation at every forward. 5.x's set_attn_implementation validates the name;
    without it, every module's config is set."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:
        for module in model.modules():
            if getattr(module, "config", None) is not None:
                module.config._attn_implementation = impl
    if model.config._attn_implementation != impl:
        raise RuntimeError("the model's attention stayed %s instead of %s"
                           % (model.config._attn_implementation, impl))


def sdpa_backend(args, micro, seq, device, torch):
    """The backend torch's SDPA picks for this model's attention (causal q, k, v of [micro, heads,
    S, head dim] in the run dtype) by the private torch._fused_sdp_choice; None where it fails."""
    try:
        from torch.nn.attention import SDPBackend
        q = torch.empty(micro, args.heads, seq, args.hidden // args.heads, device=device,
                        dtype=_run_dtype(args, torch))
        choice = torch._fused_sdp_choice(q, q, q, is_causal=True)
        return next((n for n, b in SDPBackend.__members__.items() if int(b) == choice), str(choice))
    except Exception:  # noqa: BLE001 - private API
        return None


def train_compare(args, seq, impls, oom_at, device, torch, log):
    """--compare at sequence length `seq`: one model and optimizer; in round r every attention of
    `impls` ({name: transformers name}, in --compare order; reversed when r is odd) runs one
    optimizer step. An attention in `oom_at` ({name: S}) is "oom-skipped"; one that runs out of
    memory here is added to it and the others go on. Returns the result dict with per-attention
    "impls" and the "paired" speed ratios."""
    result = _new_result(args, seq)
    names = list(impls)
    result["compare"] = names
    result["sdpa_backend"] = sdpa_backend(args, result["micro_batch"], seq, device, torch)
    runs = result["impls"] = {
        a: {"status": "oom-skipped", "error": "out of memory at S=%d" % oom_at[a], "steps": []}
        if a in oom_at else dict(status="running", **_step_counters()) for a in names}
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
    model = optimizer = scaler = run_step = None
    t_start = time.time()
    try:
        model, optimizer, scaler, run_step = _prepare(args, impls[names[0]], seq, device, torch, result)
        log(_banner(args, seq, result) + "; rounds of one step each, ABBA order")
        loop_start = time.time()
        for rnd in range(args.steps):
            if rnd > 0 and _out_of_time(args, loop_start):
                result["stopped_early"] = True
                log("train_llama: stopping after %d rounds (time limit)" % rnd)
                break
            order = [a for a in (names if rnd % 2 == 0 else names[::-1]) if runs[a]["status"] == "running"]
            if not order:
                break
            for a in order:
                try:
                    set_attention(model, impls[a])
                    if cuda:
                        torch.cuda.reset_peak_memory_stats()
                    run_step(runs[a], rnd)
                except Exception as exc:  # noqa: BLE001 - recorded for this attention only
                    _record_failure(runs[a], exc, torch)
                if runs[a]["status"] != "running":  # free what the failed step left behind
                    optimizer.zero_grad(set_to_none=True)
                    gc.collect()
                    if cuda:
                        torch.cuda.empty_cache()
            log(_round_line(args, rnd, names, runs, cuda))
    except Exception as exc:  # noqa: BLE001 - the model or optimizer could not be built
        _record_failure(result, exc, torch)
    result["wall_s"] = round(time.time() - t_start, 2)
    del model, optimizer, scaler, run_step
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    for a in names:
        run = runs[a]
        if run["status"] == "running":
            run["status"] = "ok" if result["status"] == "running" else result["status"]
            if result.get("error"):
                run["error"] = result["error"]
        if run["status"] == "oom":
            oom_at[a] = seq
        _summarise_compared(run, result, args)
    statuses = {run["status"] for run in runs.values()}
    if result["status"] == "running":
        result["status"] = "oom" if statuses <= {"oom", "oom-skipped"} else \
            "error" if "error" in statuses else "ok"
    result["paired"] = {b: _paired(runs[names[0]], runs[b], names[0], args) for b in names[1:]}
    log(_paired_line(result))
    return result


def _this_round(run, rnd):
    return run["steps"][-1] if run["steps"] and run["steps"][-1]["step"] == rnd else None


def _round_line(args, rnd, names, runs, cuda):
    cells = []
    for a in names:
        rec = _this_round(runs[a], rnd)
        cells.append("%s %s" % (a, runs[a]["status"] if rec is None else "%.0f tok/s%s loss %.4f" % (
            rec["tokens_per_s"], " %.1f GiB" % rec["peak_mem_gib"] if cuda else "", float(rec["loss"]))))
    ref = _this_round(runs[names[0]], rnd)
    ratios = ["%s/%s %.3f" % (b, names[0], rec["tokens_per_s"] / ref["tokens_per_s"])
              for b, rec in ((b, _this_round(runs[b], rnd)) for b in names[1:]) if rec and ref]
    return "round %d/%d%s: %s%s" % (rnd + 1, args.steps, " (warm-up)" if rnd < args.warmup_steps else "",
                                    ", ".join(cells), "; " + ", ".join(ratios) if ratios else "")


def _summarise_compared(run, result, args):
    """Per attention: medians over the measured (post-warm-up) steps, the largest per-step peak."""
    measured = [s for s in run["steps"] if s["step"] >= args.warmup_steps]
    run["measured_steps"] = len(measured)
    if measured:
        t = statistics.median(s["time_s"] for s in measured)
        run["step_time_s"] = round(t, 4)
        run["tokens_per_s"] = round(result["tokens_per_step"] / t, 1)
        run["mfu"] = round(result["flops_per_token"] * run["tokens_per_s"] / (args.peak_tflops * 1e12), 4)
    mem = [s["peak_mem_gib"] for s in run["steps"] if "peak_mem_gib" in s]
    if mem:
        run["peak_mem_gib"] = max(mem)
    finite = [s["loss"] for s in run["steps"] if isinstance(s["loss"], float)]
    run["final_loss"] = finite[-1] if finite else None


def _paired(ref, other, ref_name, args):
    """other's tokens/s over ref's: per measured round where both steps ran and were finite, then
    the median, min and max over those rounds."""
    def speeds(run):
        return {s["step"]: s["tokens_per_s"] for s in run["steps"] if s["step"] >= args.warmup_steps
                and isinstance(s["loss"], float) and isinstance(s["grad_norm"], float)}
    a, b = speeds(ref), speeds(other)
    ratios = [round(b[r] / a[r], 4) for r in sorted(a) if r in b]
    out = {"vs": ref_name, "rounds": len(ratios), "per_round": ratios}
    if ratios:
        out.update(ratio=round(statistics.median(ratios), 4), ratio_min=min(ratios), ratio_max=max(ratios))
        ci = median_interval(ratios)
        if ci is not None:
            out["ratio_ci95"] = list(ci)
    return out


def median_interval(values, confidence=0.95):
    """A distribution-free interval for the median of the distribution `values` are independent
    draws of: the order statistics (x_(k), x_(n+1-k)) with the largest k for which
    P(k <= Binomial(n, 1/2) <= n - k) >= confidence (the sign test's interval; the coverage holds
    for any continuous distribution). None when n is too small for any k (n < 6 at 95%)."""
    xs = sorted(values)
    n = len(xs)
    best = None
    for k in range(1, n // 2 + 1):
        outside = 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n  # P(fewer than k on one side)
        if 1 - outside < confidence:
            break
        best = (xs[k - 1], xs[n - k])
    return best


def _paired_line(result):
    runs = result["impls"]
    parts = ["%s/%s %.3fx%s [%.3f, %.3f] over %d rounds" % (
                 b, p["vs"], p["ratio"], " (median's 95%% interval %.3f-%.3f)" % tuple(p["ratio_ci95"])
                 if p.get("ratio_ci95") else "", p["ratio_min"], p["ratio_max"], p["rounds"])
             if p["rounds"] else "%s/%s: no paired rounds" % (b, p["vs"])
             for b, p in result["paired"].items()]
    speeds = ["%s %s%s" % (a, "%.0f tok/s" % r["tokens_per_s"] if "tokens_per_s" in r else r["status"],
                           " %.1f GiB" % r["peak_mem_gib"] if r.get("peak_mem_gib") else "")
              for a, r in runs.items()]
    return "train_llama: PAIRED S=%d %s: %s; %s; sdpa backend %s" % (
        result["seq"], result["dtype"], "; ".join(parts), ", ".join(speeds), result["sdpa_backend"])


def _summarise(result, args):
    steps = result["steps"]
    measured = steps[args.warmup_steps:] if len(steps) > args.warmup_steps else steps[-1:]
    result["measured_steps"] = len(measured)
    if measured:
        t = sum(s["time_s"] for s in measured)
        tps = result["tokens_per_step"] * len(measured) / t
        result["tokens_per_s"] = round(tps, 1)
        result["mfu"] = round(result["flops_per_token"] * tps / (args.peak_tflops * 1e12), 4)
        result["step_time_s"] = round(t / len(measured), 4)
    finite = [s["loss"] for s in steps if isinstance(s["loss"], float)]
    result["final_loss"] = finite[-1] if finite else None
    result["first_loss"] = finite[0] if finite else None


def _skipped(args, seq, status, why):
    return {"attn": args.attn, "dtype": args.dtype + ("-pure" if args.pure_bf16 else ""),
            "checkpoint": args.checkpoint, "seq": seq, "layers": args.layers, "status": status,
            "error": why, "steps": []}


def main(argv=None):
    args = parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def log(text):
        print(text, flush=True)

    env = environment(torch, device)
    results = []
    out_of_memory_at = None
    compare_oom_at = {}  # --compare: attention -> the S it ran out of memory at

    def emit(res):
        res["environment"] = env
        results.append(res)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(res) + "\n")
        log("train_llama: RESULT %s" % json.dumps({k: res.get(k) for k in (
            "attn", "dtype", "checkpoint", "seq", "status", "tokens_per_s", "mfu", "peak_mem_gib",
            "nonfinite_steps", "final_loss", "error")}))

    try:
        if args.compare:
            import transformers
            if not hasattr(transformers, "AttentionInterface"):
                raise RuntimeError("--compare needs transformers >= 4.48 (older ones fix the "
                                   "attention class when the model is built)")
            impl = {a: setup_attention(a) for a in args.compare}
        else:
            impl = setup_attention(args.attn)
    except Exception as exc:  # noqa: BLE001
        for seq in args.seq:
            emit(_skipped(args, seq, "error", "attention %s unavailable: %s: %s"
                          % (args.attn, type(exc).__name__, exc)))
        impl = None
    if impl is not None:
        for seq in args.seq:
            if out_of_memory_at is not None:
                emit(_skipped(args, seq, "oom-skipped", "out of memory at S=%d" % out_of_memory_at))
                continue
            if args.deadline is not None and time.time() > args.deadline - DEADLINE_MARGIN_S:
                emit(_skipped(args, seq, "skipped-budget", "too close to --deadline to start"))
                continue
            if args.compare:
                res = train_compare(args, seq, impl, compare_oom_at, device, torch, log)
            else:
                res = train_one(args, seq, impl, device, torch, log)
            if res["status"] == "oom":
                out_of_memory_at = seq
            emit(res)
    summary = {"environment": env, "args": vars(args), "results": results}
    if args.json:
        text = json.dumps(summary, indent=1)
        if args.json == "-":
            print(text, flush=True)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 1 if any(r["status"] == "error" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
