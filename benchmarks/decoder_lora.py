"""Decoder + LoRA training speed: unsupervised SimCSE on a small Qwen3-shaped decoder with LoRA adapters, csekit's
recipe against ``SentenceTransformerTrainer`` with the same adapters, in alternating rounds.

The decoder is random (``--hidden`` x ``--layers``, Qwen3's layout: grouped-query attention, gated MLP, RMSNorm)
with a byte-level BPE of ``--vocab`` tokens trained on the wiki sentences, its end-of-sequence token appended to
every sentence and used as the pad token (as csekit prepares a decoder's tokenizer for last-token pooling; both
sides load the same saved tokenizer). Both sides train LoRA rank ``--lora_r`` (alpha 2r, dropout 0.05) on every
linear layer of the decoder, last-token pooling, temperature 0.05 (= MNRL scale 20), batch 64, max length 32
(``--max-length``), on wiki1m sentences (each sentence is its own positive; dropout makes the views differ):

* csekit: ``csekit train simcse --pooler_type last_token --lora_r R`` (the recipe's model, collator, trainer and
  arguments) with ``--padding_free true`` (``csekit packed``: the positions restart at every sentence and each
  sentence attends causally within itself; the default on the CPU) and ``--padding_free false`` (``csekit
  padded``; the default on a GPU);
* sentence-transformers: ``SentenceTransformer([Transformer, Pooling("lasttoken")])`` + ``add_adapter(LoraConfig)``
  (peft, through transformers' integration) + ``MultipleNegativesRankingLoss`` + ``SentenceTransformerTrainer``,
  which pads each column on its own.

A callback times the optimizer steps after ``--warmup`` of them, end to end (collation, forward, loss, backward,
clipping, AdamW, the Trainer's bookkeeping); the sides alternate round by round with a fresh model each round.
Reported: median and min-max wall and process-CPU seconds per step, the peak GPU memory of each side (on CUDA:
the most allocated during a run, model included), and the per-round ratios
sentence-transformers / csekit packed, sentence-transformers / csekit padded and csekit padded / csekit packed
(> 1: the second is slower).

    OMP_NUM_THREADS=2 python benchmarks/decoder_lora.py [--steps 6] [--warmup 1] [--rounds 5] [--output DIR]
    python benchmarks/decoder_lora.py --device cuda --bf16 --hidden 1024 --layers 28 --max-length 64   # Qwen3-0.6B
"""

import argparse
import tempfile
from pathlib import Path

import torch
from transformers import AutoModel, PreTrainedTokenizerFast, Qwen3Config

from common import (
    command_line,
    format_spread,
    interleaved,
    machine_description,
    set_threads,
    spread,
    timing_parser,
    write_outputs,
)
from csekit.data import read_sentences, resolve_data_file
from csekit.download import WIKI1M_QUICKSTART_SENTENCES
from csekit.modeling.decoder_tokenizer import prepare_decoder_tokenizer
from train_speed import MAX_LENGTH, TEMPERATURE, TRAIN_FILE, csekit_trainer_run, st_trainer_run

EOS = "<|endoftext|>"


def save_decoder(folder: Path, sentences: list, args) -> Path:
    """A random Qwen3-shaped decoder and its BPE tokenizer (trained on ``sentences``, prepared for last-token pooling)
    in ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(sentences, trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=[EOS],
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS)
    prepare_decoder_tokenizer(tokenizer, "qwen3", "last_token", "benchmark decoder")
    heads = max(1, args.hidden // 64)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=args.hidden, num_hidden_layers=args.layers,
                         num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), head_dim=64,
                         intermediate_size=3 * args.hidden, max_position_embeddings=512,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def st_lora_model(folder: Path, hidden: int, rank: int, device, max_length: int = MAX_LENGTH):
    """sentence-transformers' decoder embedder with LoRA adapters on every linear layer (its own ``add_adapter``)."""
    from peft import LoraConfig
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    transformer = Transformer(str(folder), max_seq_length=max_length)
    model = SentenceTransformer(modules=[transformer, Pooling(hidden, "lasttoken")], device=device.type)
    model.add_adapter(LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.05, target_modules="all-linear",
                                 bias="none"))
    return model


def with_peak_memory(run, device):
    """``run`` returning its result with ``peak_gib``, the GPU memory allocated at most during it (on CUDA)."""
    def measured():
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        result = run()
        if device.type == "cuda":
            result["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        return result
    return measured


def peak_cell(runs) -> str:
    """The largest peak GPU memory of a side's runs, or – off a GPU."""
    peaks = [r["peak_gib"] for r in runs if r.get("peak_gib") is not None]
    return f"{max(peaks):.2f}" if peaks else "–"


def ratios(timings: dict, faster: str, slower: str) -> tuple:
    """The per-round ratios ``slower / faster`` of wall and CPU seconds per step."""
    pairs = list(zip(timings[faster], timings[slower]))
    return [s["wall"] / f["wall"] for f, s in pairs], [s["cpu"] / f["cpu"] for f, s in pairs]


def parse_args(argv=None) -> argparse.Namespace:
    parser = timing_parser(__doc__)
    parser.add_argument("--hidden", type=int, default=256, help="The decoder's hidden size (64 per attention head).")
    parser.add_argument("--layers", type=int, default=4, help="The decoder's layers.")
    parser.add_argument("--vocab", type=int, default=8000, help="The BPE's vocabulary size.")
    parser.add_argument("--lora_r", type=int, default=16, help="LoRA rank on both sides (alpha = 2 x rank).")
    parser.add_argument("--train-file", default=TRAIN_FILE, help="wiki sentences (a path, or in the data folder).")
    parser.add_argument("--output", default=None, help="Folder for decoder_lora.json and .md.")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both sides train there).")
    parser.add_argument("--bf16", action="store_true", help="bf16 mixed precision on both sides (--bf16 true).")
    parser.add_argument("--max-length", type=int, default=MAX_LENGTH, help="Truncation length on both sides.")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    device = torch.device(args.device)
    command, shown = command_line("decoder_lora.py", argv)
    train_file = resolve_data_file(args.train_file)
    sentences = read_sentences(train_file, limit=WIKI1M_QUICKSTART_SENTENCES)
    with tempfile.TemporaryDirectory() as folder:
        decoder = save_decoder(Path(folder), sentences, args)
        flags = ["--pooler_type", "last_token", "--lora_r", str(args.lora_r), "--temperature", str(TEMPERATURE)]
        def csekit_side(layout):
            return lambda: csekit_trainer_run(decoder, train_file, args.steps, args.warmup, device, args.bf16,
                                              extra_flags=flags + ["--padding_free", layout],
                                              max_length=args.max_length)

        timings = interleaved({name: with_peak_memory(run, device) for name, run in {
            "csekit packed": csekit_side("true"), "csekit padded": csekit_side("false"),
            "sentence-transformers": lambda: st_trainer_run(
                lambda: st_lora_model(decoder, args.hidden, args.lora_r, device, args.max_length), sentences,
                args.steps, args.warmup, device, args.bf16)}.items()}, args.rounds, warmup=False)
    rows = [f"| {side} | {format_spread([r['wall'] for r in runs])} | {format_spread([r['cpu'] for r in runs])} | "
            f"{peak_cell(runs)} |" for side, runs in timings.items()]
    compared = {f"{slower} / {faster}": ratios(timings, faster, slower) for faster, slower in (
        ("csekit packed", "sentence-transformers"), ("csekit padded", "sentence-transformers"),
        ("csekit packed", "csekit padded"))}
    lines = [f"Command: `{shown}`", f"Machine: {machine_description()}", "",
             f"**Qwen3-shaped decoder** ({args.layers} x {args.hidden}, random weights, BPE of {args.vocab} tokens), "
             f"LoRA r {args.lora_r} on every linear layer, {args.device}{' bf16' * args.bf16}, last-token pooling, "
             f"unsupervised SimCSE on wiki1m, batch 64 "
             f"x max length {args.max_length}, {args.steps} steps a round ({args.warmup} untimed), {args.rounds} "
             "rounds.", "", "| side | wall s/step, median (min–max) | CPU s/step | peak GPU memory GiB |",
             "|---|---:|---:|---:|", *rows, "",
             "Per-round ratios, wall (CPU): " + "; ".join(
                 f"{name} **{format_spread(walls)}** ({format_spread(cpus)})"
                 for name, (walls, cpus) in compared.items()) + ".", ""]
    print("\n".join(lines))
    if args.output:
        record = {"command": command, "machine": machine_description(), "rounds": args.rounds, "steps": args.steps,
                  "warmup": args.warmup, "hidden": args.hidden, "layers": args.layers, "vocab": args.vocab,
                  "lora_r": args.lora_r, "device": args.device, "bf16": args.bf16, "max_length": args.max_length,
                  "peak_gib": {s: [r.get("peak_gib") for r in runs] for s, runs in timings.items()},
                  "seconds_per_step": {s: [r["wall"] for r in runs] for s, runs in timings.items()},
                  "cpu_seconds_per_step": {s: [r["cpu"] for r in runs] for s, runs in timings.items()},
                  "ratios": {name: {"wall": spread(walls), "cpu": spread(cpus)}
                             for name, (walls, cpus) in compared.items()}}
        write_outputs(args.output, "decoder_lora", record, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
