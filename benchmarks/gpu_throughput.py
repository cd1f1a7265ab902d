"""Training throughput of SimCSE, WhitenedCSE and CMLM-CSE on one GPU, and of sentence-transformers on the same work.

    python benchmarks/gpu_throughput.py --device cuda --st --trainer-steps 300 --profile --output OUT   # eager
    python benchmarks/gpu_throughput.py --device cuda --st --trainer-steps 300 --compile --output OUT   # compiled
    python benchmarks/gpu_throughput.py --device cpu --size tiny --steps 3 --warmup 1                   # CI size

Workload: unsupervised SimCSE on a bert-base-sized encoder with random weights (config and tokenizer from
``--model-config``, default bert-base-uncased), batch 64 sentences, max length 32, two dropout views, bf16 autocast
on the GPU (float32 on the CPU unless ``--precision bf16``), real wiki1m sentences (``--data-file``). Every method is
built by its recipe, ``RECIPE.build_model(path, RECIPE.parse(flags)[0])``, with the recipe's paper defaults, so
WhitenedCSE and CMLM-CSE are timed as their recipes train them.

A step is what ``Trainer`` does per batch (transformers 5.23 ``_inner_training_loop``): the method trainer's
``compute_loss`` under autocast, backward, gradient clipping to ``max_grad_norm``, the optimizer and scheduler the
Trainer builds (``create_optimizer_and_scheduler``: fused AdamW, linear decay), ``zero_grad``. Batches are collated
by the recipe's collator beforehand and are already on the device; collation is timed on its own (ms per batch),
since the Trainer runs it in its main process (``dataloader_num_workers=0``). Timing: CUDA events between steps and
one synchronisation at the end; the ``--warmup`` steps and the first step at every new input shape (so
torch.compile's compilations) are untimed. ``--compile`` times the step the recipe's trainer takes under
``--torch_compile true`` with ``--compile-backend`` and each mode (its forward and losses compiled as one function;
sentence-transformers': ``torch.compile(model)``) instead of the eager one. ``--st``: sentence-transformers'
``MultipleNegativesRankingLoss`` (scale 1/0.05) on the same encoder weights with CLS pooling and a Linear+tanh head
(SimCSE's training model), the same sentences and the same optimizer.

Every csekit method runs twice: on packed batches (``--padding_free true``, the recipes' CPU default: the layers run
on real tokens only) and on padded ones (``--padding_free false``, the GPU default); compiled, padded per
``--compile-modes`` and packed in the default mode (its row length varies by batch, so CUDA graphs would be
re-recorded for every length).

Reported per run: step time (median, min-max), steps/s, positions/s (the token positions the encoder's layers
run on: 2 views x 64 x padded length when padded, the real tokens when packed) and real tokens/s, FLOPs per step
counted by ``torch.utils.flop_counter`` on one eager step (every matmul and attention, forward and backward),
achieved TFLOP/s, MFU = achieved / the GPU's dense bf16 datasheet peak (detected from its name: H100 SXM 989.4,
H100 PCIe 756, H200 989.4; or ``--peak-tflops``), the share of one measured 8192^3 matmul, and the projected wall
time of one wiki1m epoch (1,000,000 sentences / 64 = 15,625 steps), without and with the collation time. For SimCSE
the FLOPs also come from the formula of Kaplan et al. (2020) used by PaLM's MFU, ``6 N D + 12 L H A + 6 N_head
S``: N the encoder's matmul weights (embeddings are lookups), D the positions the layers run on per step (padded:
2 views x 64 x T, T the longest sentence; packed: the real tokens), A the query-key pairs of attention (padded:
128 x T^2; packed: the sum over its attention blocks of sentences x longest^2), L layers, H hidden size, N_head the
head's weights, S = 128 pooled vectors. bert-base, padded: N = 84.9M, D = 4,096 -> 2.10 TFLOP per step.

``--trainer-steps N`` also trains SimCSE through the recipe's own ``Trainer.train()`` (dataloader, collator,
logging, scheduler: everything) for N steps and times the steps after ``--warmup``: with the recipe's defaults and
with one setting changed at a time (``TRAINER_VARIANTS``; with ``--compile``, ``--torch_compile true``); with
``--st`` also ``SentenceTransformerTrainer``. The gap to the bare step is the Trainer's own cost. ``--profile``
writes per run the top operators by device time (CPU time on the CPU) to ``profile_<run>.txt`` and reports the
kernels per step and the share of the wall time the GPU was busy: far below 1 means the CPU issuing kernels, not
the GPU, bounds the step. Results are rewritten after every run, so a command stopped by a time limit keeps what
it measured.

A GPU machine without internet that receives a copy of the working tree only needs the model config, the data and
the pinned packages carried along. From the repository root here::

    mkdir -p outputs/gpu_assets && cp -r ../shared/models/bert-base-uncased-tokenizer \
        ../shared/data/wiki/wiki1m_for_simcse.head11914.txt outputs/gpu_assets/
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
        transformers==5.23.0 huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 accelerate==1.15.0 \
        datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 sentence-transformers==6.2.0 httpx2==2.16.2 \
        httpcore2==2.16.2 truststore==0.10.5 anyio==4.16.0 sniffio==1.3.1 idna==3.20 h11==0.16.0 click==8.5.1 \
        regex==2026.5.9 fsspec==2026.9.0

and there, with ``.whl`` and ``outputs/gpu_assets`` carried (about 23 MB)::

    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site .whl/*.whl .
    PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 python3 benchmarks/gpu_throughput.py --device cuda \
        --model-config outputs/gpu_assets/bert-base-uncased-tokenizer \
        --data-file outputs/gpu_assets/wiki1m_for_simcse.head11914.txt --st --trainer-steps 300 --profile --output OUT
"""

import argparse
import importlib
import shlex
import statistics
import sys
import tempfile
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, Trainer, get_scheduler

from common import (
    count_flops,
    datasheet_peak_tflops,
    device_description,
    format_spread,
    matmul_tflops,
    set_threads,
    spread,
    synchronize,
    write_outputs,
)
from csekit.data import read_sentences, resolve_data_dir, resolve_data_file
from csekit.download import WIKI1M_QUICKSTART_SENTENCES
from csekit.errors import DataError
from csekit.loading import resolve_device
from csekit.modeling.packing import PackedSequences
from train_speed import BATCH, MAX_LENGTH, TEMPERATURE, csekit_trainer_run, recipe_flags, st_trainer_run

RECIPES = {"simcse": "csekit.recipes.simcse", "whitenedcse": "csekit.recipes.whitenedcse",
           "cmlm_cse": "csekit.recipes.cmlm_cse"}
NAMES = {"simcse": "SimCSE", "whitenedcse": "WhitenedCSE", "cmlm_cse": "CMLM-CSE", "st": "sentence-transformers MNRL"}
# --size tiny (CI): a 2-layer, 32-wide BERT (vocabulary kept) and the method flags that fit it
TINY_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
# (WhitenedCSE's default k fits it: 16 groups of 2 channels)
TINY_FLAGS = {"cmlm_cse": ["--extractor_layers", "1", "--fusion_layers", "1"]}
WIKI1M_STEPS = 15_625  # 1,000,000 sentences in batches of 64: SimCSE's one epoch
TARGET_EPOCH_SECONDS = 150  # the target: one wiki1m epoch of SimCSE bert-base in <= 150 s on one H200 (or H100)
# --trainer-steps: the recipe's defaults (padded on a GPU), then the packed layout
TRAINER_VARIANTS = [("(recipe defaults)", []), ("--padding_free true", ["--padding_free", "true"])]
COMPILED_TRAINER_VARIANTS = [("--torch_compile true", ["--torch_compile", "true"]),
                             ("--torch_compile true --torch_compile_mode reduce-overhead",
                              ["--torch_compile", "true", "--torch_compile_mode", "reduce-overhead"]),
                             ("--torch_compile true --padding_free true",
                              ["--torch_compile", "true", "--padding_free", "true"])]
BERT_BASE = "bert-base-uncased-tokenizer"


def default_model_config() -> str:
    """bert-base-uncased's config + tokenizer: ``models/`` beside the data folder, else ``../shared/models``."""
    candidates = [Path(__file__).resolve().parents[2] / "shared" / "models" / BERT_BASE]
    try:
        candidates.insert(0, resolve_data_dir().parent / "models" / BERT_BASE)
    except DataError:
        pass
    return str(next((c for c in candidates if c.is_dir()), candidates[-1]))


def save_random_encoder(config_dir, size: str, folder: str):
    """A seeded random encoder from ``config_dir``'s config (shrunk for ``tiny``) and its tokenizer, in ``folder``."""
    config = AutoConfig.from_pretrained(config_dir)
    if size == "tiny":
        for key, value in TINY_CONFIG.items():
            setattr(config, key, value)
    torch.manual_seed(0)
    AutoModel.from_config(config, add_pooling_layer=False).save_pretrained(folder)
    AutoTokenizer.from_pretrained(config_dir).save_pretrained(folder)
    return config


class Run:
    """One timed workload: batches already on the device and ``step(batch)``, one Trainer optimizer step;
    ``eager_step`` is the same step without torch.compile (for counting FLOPs)."""

    def __init__(self, name, step, eager_step, batches, collate_seconds, formula_flops=None, forward_loss=None):
        self.name, self.step, self.eager_step, self.batches = name, step, eager_step, batches
        self.collate_seconds, self.formula_flops = collate_seconds, formula_flops
        self.forward_loss = forward_loss  # the eager forward + loss of one batch (benchmarks/step_ops.py)


def trainer_step(forward_loss, model, optimizer, scheduler, max_grad_norm, device, precision):
    """``step(batch)`` as the Trainer's inner loop does it: loss under autocast, backward, clip, step, zero_grad."""
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()

    def step(batch):
        with cast:
            loss = forward_loss(batch)
        loss.backward()
        if max_grad_norm > 0:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        scheduler.step()
        model.zero_grad()

    return step


def collate_all(collator, feature_batches, device):
    """Collate every batch (timed, on the CPU), then move them to the device; ``(batches, seconds per batch)``."""
    batches, seconds = [], []
    for features in feature_batches:
        start = time.perf_counter()
        batches.append(collator(features))
        seconds.append(time.perf_counter() - start)
    return [{key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}
            for batch in batches], seconds


def csekit_run(method, folder, size, device, precision, compiled, feature_batches, padding_free=True,
               backend="inductor") -> Run:
    """``method`` built by its recipe and stepped as its recipe's trainer steps it, on packed or padded batches;
    ``compiled``: a ``torch.compile`` mode (``None``: eager), with ``backend`` (a backend's name, or a backend
    function: ``step_ops.py``'s counter). Compiled, the step is the trainer's under ``--torch_compile true
    --torch_compile_backend BACKEND --torch_compile_mode MODE``: its forward and losses compiled as one function with
    that backend and mode (a model compiled on its own inside it would be inlined, its own backend and mode unused)."""
    recipe = importlib.import_module(RECIPES[method]).RECIPE
    flags = recipe_flags(folder, WIKI1M_STEPS, device) + (TINY_FLAGS.get(method, []) if size == "tiny" else [])
    flags += ["--padding_free", str(padding_free).lower()]
    if compiled:
        flags += ["--torch_compile", "true", "--torch_compile_mode", compiled]
        flags += ["--torch_compile_backend", backend] if isinstance(backend, str) else []
    model_args, data_args, training_args, extra = recipe.parse(flags)
    torch.manual_seed(0)
    model = recipe.build_model(folder, model_args)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model.tokenizer = tokenizer
    collator = recipe.collator(tokenizer, model, data_args, extra)
    trainer = recipe.trainer_class(model=model, args=training_args, data_collator=collator, processing_class=tokenizer)
    if compiled and not isinstance(backend, str):  # a function is no flag: the step's compile (not the trainer's
        trainer.args.torch_compile_backend = backend  # accelerator, which takes names) gets it as it is
    trainer.create_optimizer_and_scheduler(num_training_steps=WIKI1M_STEPS)
    model = trainer.model.train()
    batches, collate_seconds = collate_all(collator, [[{"sent0": s} for s in f] for f in feature_batches], device)
    def eager_loss(batch):  # compute_loss with the step function eager: forward and losses, their running record
        losses = trainer.forward_losses(model, batch)[1]
        trainer.record_losses(losses)
        return losses["loss"]

    # the step as the trainer takes it (compiled under --torch_compile), then eager (FLOPs and ops are counted on it)
    steps = [trainer_step(forward_loss, model, trainer.optimizer, trainer.lr_scheduler, training_args.max_grad_norm,
                          device, precision)
             for forward_loss in (lambda batch: trainer.compute_loss(model, batch), eager_loss)]
    formula = simcse_formula_flops(model, batches[0]) if method == "simcse" else None
    name = f"{NAMES[method]} {'packed' if padding_free else 'padded'}" + compiled_label(compiled)
    return Run(name, *steps, batches, collate_seconds, formula,
               lambda batch: trainer.forward_losses(model, batch)[1]["loss"])


def compile_model(model, mode: str, backend: str):
    """``torch.compile(model)`` with ``mode`` (inductor's) or another ``backend`` (which takes no mode)."""
    return torch.compile(model, mode=mode) if backend == "inductor" else torch.compile(model, backend=backend)


def st_model(folder, config, device):
    """CLS pooling + Linear(H, H) + tanh over the saved encoder: SimCSE's training-time model in ST modules."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer

    transformer = Transformer(str(folder), max_seq_length=MAX_LENGTH)
    pooling = Pooling(config.hidden_size, "cls")
    head = Dense(config.hidden_size, config.hidden_size, activation_function=nn.Tanh())
    return SentenceTransformer(modules=[transformer, pooling, head], device=str(device))


def st_run(folder, config, device, precision, compiled, feature_batches, backend="inductor") -> Run:
    """sentence-transformers' MNRL on the same encoder weights, head shape, sentences and optimizer as SimCSE."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    torch.manual_seed(0)
    model = st_model(folder, config, device).train()
    loss_fn = MultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE)
    training_args = importlib.import_module(RECIPES["simcse"]).RECIPE.parse(recipe_flags(folder, 1, device))[2]
    optimizer_class, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(training_args, model)
    optimizer = optimizer_class([p for p in model.parameters() if p.requires_grad], **optimizer_kwargs)
    scheduler = get_scheduler(training_args.lr_scheduler_type, optimizer, 0, WIKI1M_STEPS)
    preprocess = getattr(model, "preprocess", None) or model.tokenize
    columns = ("anchor", "positive")

    def collator(texts):  # SentenceTransformerTrainer's collator tokenizes each column on its own
        return {f"{column}.{key}": value for column in columns for key, value in preprocess(texts).items()}

    batches, collate_seconds = collate_all(collator, feature_batches, device)
    compiled_model = compile_model(model, compiled, backend) if compiled else model

    def forward_loss(batch, forward):
        loss_fn.model = forward
        features = [{k.split(".", 1)[1]: v for k, v in batch.items() if k.startswith(c + ".")} for c in columns]
        return loss_fn(features, None)

    steps = [trainer_step(lambda batch, forward=forward: forward_loss(batch, forward), model, optimizer, scheduler,
                          training_args.max_grad_norm, device, precision) for forward in (compiled_model, model)]
    return Run(NAMES["st"] + compiled_label(compiled), *steps, batches, collate_seconds,
               forward_loss=lambda batch: forward_loss(batch, model))


def compiled_label(mode) -> str:
    """`` (torch.compile)``, `` (torch.compile, reduce-overhead)``, or nothing for an eager run."""
    return "" if not mode else " (torch.compile)" if mode == "default" else f" (torch.compile, {mode})"


def simcse_formula_flops(model, batch) -> float:
    """``6 N D + 12 L H A + 6 N_head S`` for one SimCSE step on ``batch`` (see the module docstring): D the token
    positions the layers run on (packed: the real tokens), A the query-key pairs attention computes (padded: S x T^2;
    packed: the sum over its attention blocks of sentences x longest^2)."""
    encoder_config = model.config.encoder_config
    matmul_weights = sum(m.weight.numel() for m in model.encoder.modules() if isinstance(m, nn.Linear))
    head_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)) - matmul_weights
    lengths = batch.get("sequence_lengths")
    if lengths is None:
        sequences, length = batch["input_ids"][..., 0].numel(), batch["input_ids"].shape[-1]
        tokens, pairs = sequences * length, sequences * length**2
    else:
        sequences, tokens = lengths.numel(), batch["input_ids"].numel()
        blocks = PackedSequences.of_batch(lengths, batch.get("attention_mask"), tokens).blocks  # as the step does
        pairs = sum(count * longest**2 for _, count, longest, _ in blocks)
    attention = 12 * encoder_config.num_hidden_layers * encoder_config.hidden_size * pairs
    return 6 * matmul_weights * tokens + attention + 6 * head_weights * sequences


def shape_key(batch) -> tuple:
    return tuple(sorted((key, tuple(value.shape)) for key, value in batch.items() if torch.is_tensor(value)))


def view_tokens(batch) -> tuple:
    """``(positions, real)`` tokens of the contrastive views: the positions the encoder runs on (padding included)
    and the real tokens among them (csekit's ``input_ids``, packed or padded, or ST's ``<column>.input_ids``)."""
    def total(name, count):
        return sum(count(v) for k, v in batch.items() if k == name or k.endswith("." + name))

    if "sequence_lengths" in batch:  # packed: every position is a real token
        return batch["input_ids"].numel(), int(batch["sequence_lengths"].sum())
    return total("input_ids", torch.numel), total("attention_mask", lambda mask: int(mask.sum()))


def timed_steps(run: Run, warmup: int, steps: int, device) -> dict:
    """Warm up (plus one untimed step at every new input shape), then time ``steps`` steps."""
    seen = set()
    for batch in run.batches[:warmup]:
        run.step(batch)
        seen.add(shape_key(batch))
    timed = run.batches[warmup : warmup + steps]
    for batch in timed:
        if shape_key(batch) not in seen:
            run.step(batch)
            seen.add(shape_key(batch))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(len(timed) + 1)] if device.type == "cuda" else None
    synchronize(device)
    clock = [time.perf_counter()]
    if events:
        events[0].record()
    for index, batch in enumerate(timed):
        run.step(batch)
        if events:
            events[index + 1].record()
        else:
            clock.append(time.perf_counter())
    synchronize(device)
    total = time.perf_counter() - clock[0]
    if events:
        per_step = [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(len(timed))]
    else:
        per_step = [b - a for a, b in zip(clock, clock[1:])]
    return {"per_step": per_step, "total": total, "batches": timed}


def profile_steps(run: Run, device, steps: int, path: Path) -> dict:
    """torch.profiler over ``steps`` steps: top operators by device time (GPU) and by CPU time in ``path``; on a GPU,
    the kernels per step and the share of the wall time the GPU was busy."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    batches = run.batches[:steps]
    synchronize(device)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for batch in batches:
            run.step(batch)
        synchronize(device)
        wall = time.perf_counter() - start
    averages = prof.key_averages()
    summary = {"steps": len(batches), "wall_seconds": wall}
    if device.type == "cuda":
        # kineto lists every kernel (and memcpy/memset) as an event of the CUDA device type; summing only those
        # counts each kernel once (the CPU op that launched it carries the same time again)
        kernels = [e for e in averages if e.device_type == torch.autograd.DeviceType.CUDA
                   and not getattr(e, "is_user_annotation", False)]
        busy = sum(e.self_device_time_total for e in kernels) / 1e6
        summary.update(gpu_busy_share=busy / wall, kernel_ms_per_step=busy / len(batches) * 1e3,
                       kernels_per_step=sum(e.count for e in kernels) / len(batches))
    tables = [averages.table(sort_by=key, row_limit=25) for key in
              (["self_cuda_time_total"] if device.type == "cuda" else []) + ["self_cpu_time_total"]]
    path.write_text(f"{run.name}: {summary}\n\n" + "\n\n".join(tables) + "\n")
    return summary


def measure(run: Run, warmup: int, steps: int, device, profile_dir) -> dict:
    timing = timed_steps(run, warmup, steps, device)
    n = len(timing["per_step"])
    seconds = timing["total"] / n
    padded, real = (sum(counts) / n for counts in zip(*map(view_tokens, timing["batches"])))
    collate = statistics.median(run.collate_seconds)
    result = {
        "name": run.name, "steps": n, "step_seconds": spread(timing["per_step"]), "seconds_per_step": seconds,
        "steps_per_second": 1 / seconds, "tokens_per_second": padded / seconds,
        "real_tokens_per_second": real / seconds, "padding_share": 1 - real / padded,
        "collate_seconds_per_batch": collate,
        "formula_tflop_per_step": run.formula_flops and run.formula_flops / 1e12,
        "epoch_seconds": WIKI1M_STEPS * seconds, "epoch_seconds_with_collation": WIKI1M_STEPS * (seconds + collate),
    }
    # FLOPs of one eager step (a compiled model runs the same matmuls; the counter cannot see into compiled code)
    result["counted_tflop_per_step"] = count_flops(lambda: run.eager_step(run.batches[0])) / 1e12
    if profile_dir:
        slug = "".join(c if c.isalnum() else "_" for c in run.name.lower()).strip("_")
        result["profile"] = profile_steps(run, device, 5, Path(profile_dir) / f"profile_{slug}.txt")
    return result


def add_rates(result, tflop, peak, matmul_rate):
    """Achieved TFLOP/s, MFU and the share of the measured matmul rate from ``tflop`` per step."""
    achieved = tflop / result["seconds_per_step"]
    result.update(tflop_per_step=tflop, achieved_tflops=achieved, mfu=achieved / peak if peak else None,
                  share_of_measured_matmul=achieved / matmul_rate)


def step_result(key, run: Run, args, device, peak, matmul_rate, output_dir) -> dict:
    """Time ``run`` and add its rates; one line of progress."""
    result = measure(run, args.warmup, args.steps, device, output_dir if args.profile else None)
    add_rates(result, result["counted_tflop_per_step"], peak, matmul_rate)
    result.update(method=key, compiled=args.compile)
    print(f"  {result['seconds_per_step'] * 1e3:.1f} ms/step, {result['achieved_tflops']:.3g} TFLOP/s, "
          f"wiki1m epoch {result['epoch_seconds']:.0f} s", flush=True)
    return result


def markdown(record) -> str:
    def number(value, pattern):
        return "–" if value is None else pattern.format(value)

    rows = []
    for r in record["results"]:
        step_ms = format_spread([r["step_seconds"][k] for k in ("median", "min", "max")], 1, 1e3)
        busy = r.get("profile", {}).get("gpu_busy_share")
        rows.append(
            f"| {r['name']} | {step_ms} | {r['steps_per_second']:.2f} | {r['tokens_per_second']:,.0f} | "
            f"{r['real_tokens_per_second']:,.0f} | "
            f"{r['tflop_per_step']:.3g} | {r['achieved_tflops']:.3g} | {number(r['mfu'], '{:.1%}')} | "
            f"{r['collate_seconds_per_batch'] * 1e3:.1f} | {r['epoch_seconds']:.0f} "
            f"({r['epoch_seconds_with_collation']:.0f}) | {number(r['step_time_vs_simcse'], '{:.2f}x')} | "
            f"{number(busy, '{:.0%}')} |"
        )
    for r in record["trainer"]:
        rows.append(f"| {r['name']} | {r['seconds_per_step'] * 1e3:.1f} (mean) | {1 / r['seconds_per_step']:.2f} | "
                    f"– | – | – | – | – | (in the step) | {r['epoch_seconds']:.0f} | – | – |")
    peak, model = record["peak"], record["model"]
    lines = [
        f"Command: `{record['command']}`",
        f"Device: {record['device']}; torch {record['versions']['torch']}, transformers "
        f"{record['versions']['transformers']}; {record['precision']}; encoder {model['layers']} layers x "
        f"{model['hidden']} (random weights), batch {BATCH} x 2 views, max length {MAX_LENGTH}, "
        f"{record['steps']} timed steps after {record['warmup']} warm-up.",
        f"MFU peak: {number(peak['datasheet_tflops'], '{:.1f}')} TFLOP/s ({peak['source']}); one measured "
        f"{peak['matmul_size']}^3 matmul: {peak['measured_matmul_tflops']:.3g} TFLOP/s.",
        "",
        "| run | step ms, median (min–max) | steps/s | positions/s | real tokens/s | TFLOP/step | TFLOP/s | MFU | "
        "collate ms | wiki1m epoch s (+ collation) | step time vs SimCSE | GPU busy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    for simcse in (r for r in record["results"] if r["method"] == "simcse"):
        lines.append(f"{simcse['name']} FLOPs per step: formula 6ND + 12LHA {simcse['formula_tflop_per_step']:.4g} "
                     f"TFLOP, counted {simcse['counted_tflop_per_step']:.4g}; padding is {simcse['padding_share']:.0%} "
                     "of the positions.")
    for r in record["results"]:
        profile = r.get("profile", {})
        if "kernels_per_step" in profile:
            lines.append(f"Profile, {r['name']}: {profile['kernels_per_step']:.0f} kernels and "
                         f"{profile['kernel_ms_per_step']:.1f} ms of kernel time per step, GPU busy "
                         f"{profile['gpu_busy_share']:.0%} of the wall time.")
    lines += [f"Failed: {e['name']}: {e['error']}" for e in record["errors"]]
    target = record["target"]
    if target["run"]:
        verdict = "meets" if target["met"] else "misses"
        lines.append(f"Target (one wiki1m epoch of SimCSE <= {TARGET_EPOCH_SECONDS} s): the fastest SimCSE run, "
                     f"{target['run']}, projects {target['epoch_seconds']:.0f} s and {verdict} it.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (default: %(default)s).")
    parser.add_argument("--size", choices=("base", "tiny"), default="base",
                        help="base: the --model-config encoder; tiny: 2 layers x 32 (CI).")
    parser.add_argument("--steps", type=int, default=200, help="Timed optimizer steps per run.")
    parser.add_argument("--warmup", type=int, default=20, help="Untimed steps before them.")
    parser.add_argument("--methods", default=",".join(RECIPES), help="Comma-separated, of: %(default)s.")
    parser.add_argument("--compile", action="store_true", help="Time every run with torch.compile(model) instead.")
    parser.add_argument("--compile-modes", default="default", help="Comma-separated torch.compile modes of the "
                        "compiled bare runs (default, reduce-overhead: CUDA graphs, max-autotune...).")
    parser.add_argument("--compile-backend", default="inductor", help="The torch.compile backend of every compiled "
                        "run (aot_eager: traced and differentiated as inductor's input, without code generation; "
                        "takes no mode). Default: %(default)s.")
    parser.add_argument("--st", action="store_true", help="Also time sentence-transformers' MNRL on the same work.")
    parser.add_argument("--trainer-steps", type=int, default=0, help="Also time N steps of the real Trainer.train() "
                        "(SimCSE; with --st also SentenceTransformerTrainer; with --compile also --torch_compile).")
    parser.add_argument("--profile", action="store_true", help="Write profile_<run>.txt: top operators, GPU busy.")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="auto: bf16 autocast on a GPU, float32 on the CPU.")
    parser.add_argument("--model-config", default=None, help="Folder with the encoder's config.json and tokenizer "
                        f"(weights are random; default: bert-base-uncased, {default_model_config()}).")
    parser.add_argument("--data-file", default="wiki/wiki1m_for_simcse.txt",
                        help="Training sentences (a path, or relative to the data folder).")
    parser.add_argument("--peak-tflops", type=float, default=None, help="Peak for MFU (default: the datasheet's).")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: OMP_NUM_THREADS).")
    parser.add_argument("--output", default=None, help="Folder for gpu_throughput.json / .md and the profiles.")
    args = parser.parse_args(argv)
    try:
        record = run_all(args, argv)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    return record


def checked_inputs(args) -> tuple:
    """``(device, precision, methods, model_config, data_file, sentences)`` from the flags, or a one-line error."""
    device = resolve_device(args.device)
    precision = ("bf16" if device.type == "cuda" else "fp32") if args.precision == "auto" else args.precision
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(RECIPES))
    if unknown or args.steps < 1 or args.warmup < 0 or args.trainer_steps < 0:
        raise DataError(f"--methods takes {', '.join(RECIPES)} (got {args.methods!r}); --steps >= 1, --warmup >= 0, "
                        "--trainer-steps >= 0")
    model_config = args.model_config or default_model_config()
    if not Path(model_config, "config.json").is_file():
        raise DataError(f"{model_config}: no config.json (pass --model-config FOLDER with config.json and a tokenizer)")
    data_file = resolve_data_file(args.data_file)
    sentences = read_sentences(data_file, limit=WIKI1M_QUICKSTART_SENTENCES)
    if len(sentences) < BATCH:
        raise DataError(f"{data_file}: {len(sentences)} sentences, fewer than one batch of {BATCH}")
    return device, precision, methods, model_config, data_file, sentences


def new_record(args, argv, device, precision) -> dict:
    """The run's record before any timing: command, device, versions, sizes and the GPU's peak (measured matmul
    rate and datasheet)."""
    peak = args.peak_tflops or datasheet_peak_tflops(device)
    matmul_size = 8192 if device.type == "cuda" else 1024
    matmul_rate = matmul_tflops(device, torch.bfloat16 if precision == "bf16" else torch.float32, matmul_size)
    print(f"device: {device_description(device)}; measured matmul {matmul_rate:.3g} TFLOP/s; peak {peak}", flush=True)
    command = f"python benchmarks/gpu_throughput.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    return {
        "command": command, "device": device_description(device), "device_type": device.type, "precision": precision,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__}, "size": args.size,
        "batch_size": BATCH, "max_length": MAX_LENGTH, "steps": args.steps, "warmup": args.warmup,
        "compile": args.compile, "compile_backend": args.compile_backend, "peak": {
            "datasheet_tflops": peak, "measured_matmul_tflops": matmul_rate, "matmul_size": matmul_size,
            "source": "--peak-tflops" if args.peak_tflops else ("datasheet, dense bf16" if peak else "unknown")},
        "wiki1m_steps": WIKI1M_STEPS, "results": [], "trainer": [], "errors": [],
    }


def trainer_warmup(args) -> int:
    """The untimed first steps of a ``Trainer.train()`` run: ``--warmup``, leaving at least one step timed."""
    return max(min(args.warmup, args.trainer_steps - 1), 0)


def timing_jobs(args, record, folder, config, inputs, output_dir) -> list:
    """``[(name, job)]``, the headline rows first (a run cut by a time limit loses the later ones): with
    ``--trainer-steps`` the ``Trainer.train()`` runs (the recipe's padded ones, with ``--st``
    sentence-transformers', then the packed one), then the bare steps of each method (packed and padded, or compiled
    per mode) and sentence-transformers' with ``--st``."""
    device, precision, methods, _, data_file, sentences = inputs
    feature_batches = [[sentences[(i * BATCH + j) % len(sentences)] for j in range(BATCH)]
                       for i in range(args.warmup + args.steps)]
    peak, matmul_rate = record["peak"]["datasheet_tflops"], record["peak"]["measured_matmul_tflops"]

    def bare_steps(key, padding_free=None, mode=None):
        run = (st_run(folder, config, device, precision, mode, feature_batches, args.compile_backend) if key == "st"
               else csekit_run(key, folder, args.size, device, precision, mode, feature_batches, padding_free,
                               args.compile_backend))
        return {**step_result(key, run, args, device, peak, matmul_rate, output_dir), "padding_free": padding_free}

    modes = [m.strip() for m in args.compile_modes.split(",")] if args.compile else [None]
    jobs = []  # the headline rows first (Trainer.train(), csekit's then sentence-transformers'), the bare steps after
    if args.trainer_steps:
        steps, warmup, bf16 = args.trainer_steps, trainer_warmup(args), precision == "bf16"
        backend = ["--torch_compile_backend", args.compile_backend] if args.compile else []
        jobs += [(f"SimCSE, Trainer.train() {name}", lambda flags=flags: csekit_trainer_run(
            folder, data_file, steps, warmup, device, bf16, flags + backend))
            for name, flags in (COMPILED_TRAINER_VARIANTS if args.compile else TRAINER_VARIANTS)]
        if args.st:  # before the last variant, the packed one (the default layout on a GPU is padded)
            name = f"sentence-transformers, SentenceTransformerTrainer{' torch_compile' * args.compile}"
            jobs.insert(len(jobs) - 1, (name, lambda: st_trainer_run(
                lambda: st_model(folder, config, device), sentences, steps, warmup, device, bf16, args.compile,
                compile_backend=args.compile_backend)))
    jobs += [(f"{NAMES[key]} {'packed' if packed else 'padded'}", lambda key=key, packed=packed, mode=mode:
              bare_steps(key, packed, mode)) for mode in modes for key in methods
             for packed in ((True, False) if mode is None else (False, True) if mode == "default" else (False,))]
    jobs += [(NAMES["st"], lambda: bare_steps("st", mode=modes[0]))] if args.st else []
    return jobs


def run_job(name, job, record, device, trainer_steps: int) -> None:
    """One timing into ``record``; a failing one (an op missing on this GPU, ...) is recorded, the others run."""
    print(f"timing {name} ...", flush=True)
    try:
        result = job()
    except Exception as error:
        traceback.print_exc()
        record["errors"].append({"name": name, "error": f"{type(error).__name__}: {error}"})
        return
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if "wall" in result:  # a Trainer.train() run
        record["trainer"].append({"name": name, "seconds_per_step": result["wall"], "steps": trainer_steps,
                                  "epoch_seconds": WIKI1M_STEPS * result["wall"]})
    else:
        record["results"].append(result)


def run_all(args, argv) -> dict:
    set_threads(args.threads)
    inputs = checked_inputs(args)
    device, precision, _, model_config = inputs[:4]
    output_dir = Path(args.output or tempfile.mkdtemp(prefix="gpu_throughput-"))
    output_dir.mkdir(parents=True, exist_ok=True)
    record = new_record(args, argv, device, precision)
    with tempfile.TemporaryDirectory() as folder:
        config = save_random_encoder(model_config, args.size, folder)
        record["model"] = {"layers": config.num_hidden_layers, "hidden": config.hidden_size}
        trainer_steps = args.trainer_steps - trainer_warmup(args)  # the timed steps of a Trainer.train() run
        for name, job in timing_jobs(args, record, folder, config, inputs, output_dir):
            run_job(name, job, record, device, trainer_steps)
            write_record(record, output_dir)  # a command stopped by a time limit keeps what it measured
    table = write_record(record, output_dir)
    print(table)
    print(f"written: {output_dir}/gpu_throughput.json and .md")
    return record


def write_record(record, output_dir) -> str:
    """Add the comparisons to SimCSE and the target verdict, write JSON + markdown, return the markdown."""
    results, trainer = record["results"], record["trainer"]
    def simcse(padding_free):  # each csekit run against SimCSE on the same layout; sentence-transformers: packed
        return next((r for r in results if r["method"] == "simcse" and r["padding_free"] == padding_free), None)

    for r in results:
        baseline = simcse(True if r["padding_free"] is None else r["padding_free"])
        r["step_time_vs_simcse"] = r["seconds_per_step"] / baseline["seconds_per_step"] if baseline else None
    runs = [r for r in results if r["method"] == "simcse"] + [r for r in trainer if r["name"].startswith("SimCSE")]
    best = min(runs, key=lambda r: r["epoch_seconds"], default=None)
    record["target"] = {"epoch_seconds": best and best["epoch_seconds"], "run": best and best["name"],
                        "met": bool(best and best["epoch_seconds"] <= TARGET_EPOCH_SECONDS)}
    table = markdown(record)
    write_outputs(output_dir, "gpu_throughput", record, table)
    return table


if __name__ == "__main__":
    main()
