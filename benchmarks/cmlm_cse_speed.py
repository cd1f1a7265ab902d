"""Training step time of CMLM-CSE vs SimCSE on the same model, batch and length, interleaved in one process.

    python benchmarks/cmlm_cse_speed.py --model all-MiniLM-L6-v2 --pooler avg --extractor-layers 4 \
        --fusion-layers 2 --batch-size 64 --max-length 32 --steps 10 --output benchmarks/results/cmlm_cse_speed.md

A step is what the Trainer does per batch: the trainer's own ``compute_loss`` (SimCSETrainer / CMLMCSETrainer),
backward, AdamW step, zero_grad; collation (tokenising, masking) is outside the timed region. The two methods
alternate step by step (the order flips every round) so machine load hits both alike; the ratio is of medians.
Also timed: inference (``encode``-style forward, no grad) of the published CMLM-CSE model vs SimCSE's.
"""

import argparse
import shlex
import statistics
import sys
import tempfile
import time

import torch
from datasets import Dataset
from transformers import AutoTokenizer, TrainingArguments

from common import device_description, emit, synchronize
from csekit.data import read_sentences, resolve_data_file
from csekit.download import WIKI1M_QUICKSTART_SENTENCES
from csekit.loading import resolve_device, resolve_model_path
from csekit.modeling import CMLMCSEForPreTraining, SimCSEModel
from csekit.trainers import CMLMCSECollator, CMLMCSETrainer, ContrastiveCollator, SimCSETrainer


def timed(function, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="Backbone (folder or 'all-MiniLM-L6-v2').")
    parser.add_argument("--pooler", default="avg", help="Pooler type of both models.")
    parser.add_argument("--extractor-layers", type=int, default=4, help="CMLM-CSE frozen extractor blocks.")
    parser.add_argument("--fusion-layers", type=int, default=2, help="CMLM-CSE fusioner blocks.")
    parser.add_argument("--mask-rate", type=float, default=0.15, help="CMLM-CSE mask rate.")
    parser.add_argument("--batch-size", type=int, default=64, help="Sentences per step.")
    parser.add_argument("--max-length", type=int, default=32, help="Truncation length.")
    parser.add_argument("--steps", type=int, default=10, help="Timed steps per method (after 2 warm-up steps).")
    parser.add_argument("--train-file", default="wiki/wiki1m_for_simcse.txt", help="Sentences to batch.")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s).")
    parser.add_argument("--output", default=None, help="Write the markdown table here (also printed).")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)

    torch.manual_seed(0)
    model_path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    sentences = read_sentences(resolve_data_file(args.train_file), limit=WIKI1M_QUICKSTART_SENTENCES)
    steps = args.steps + 2
    size = args.batch_size
    features = [[{"sent0": s} for s in sentences[i * size : (i + 1) * size]] for i in range(steps)]
    simcse = SimCSEModel.from_encoder(str(model_path), pooler_type=args.pooler)
    cmlm = CMLMCSEForPreTraining.from_encoder(str(model_path), pooler_type=args.pooler,
                                              extractor_layers=args.extractor_layers, fusion_layers=args.fusion_layers,
                                              mask_rate=args.mask_rate)
    simcse, cmlm = simcse.to(device), cmlm.to(device)
    # the trainers are only used for compute_loss; nothing is saved, so a throwaway folder will do
    training_args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="cmlm_cse_speed-"), report_to="none",
                                      use_cpu=device.type == "cpu", remove_unused_columns=False)
    dummy = Dataset.from_dict({"sent0": sentences[:8]})
    methods = {
        "SimCSE": (simcse, SimCSETrainer, ContrastiveCollator(tokenizer, max_length=args.max_length)),
        "CMLM-CSE": (cmlm, CMLMCSETrainer,
                     CMLMCSECollator(tokenizer, max_length=args.max_length, config=cmlm.config)),
    }
    runners, times, inference = {}, {name: [] for name in methods}, {name: [] for name in methods}
    for name, (model, trainer_class, collator) in methods.items():
        trainer = trainer_class(model=model.train(), args=training_args, train_dataset=dummy, data_collator=collator)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-5)
        batches = [{key: value.to(device) for key, value in collator(batch).items()} for batch in features]
        runners[name] = (trainer, model, optimizer, batches)
    published = {"SimCSE": simcse, "CMLM-CSE": cmlm.sentence_encoder()}

    def train_step(name, index):
        trainer, model, optimizer, batches = runners[name]
        trainer.compute_loss(model, batches[index]).backward()
        optimizer.step()
        optimizer.zero_grad()

    def inference_step(name, index):
        batch = {k: v[:, 0] for k, v in runners[name][3][index].items() if not k.startswith("mlm_")}
        with torch.inference_mode():
            published[name].eval()(**batch)

    order = list(methods)
    for index in range(steps):
        for name in order:
            train_time = timed(lambda: train_step(name, index), device)
            infer_time = timed(lambda: inference_step(name, index), device)
            if index >= 2:
                times[name].append(train_time)
                inference[name].append(infer_time)
        order.reverse()
        latest = ", ".join(f"{name} {times[name][-1]:.2f}s" for name in methods if times[name])
        print(f"round {index + 1}/{steps}: {latest or 'warm-up'}", flush=True)

    median = {name: statistics.median(values) for name, values in times.items()}
    median_inference = {name: statistics.median(values) for name, values in inference.items()}
    lines = [
        f"Command: `python benchmarks/cmlm_cse_speed.py {shlex.join(argv if argv is not None else sys.argv[1:])}`",
        f"(torch {torch.__version__}, {torch.get_num_threads()} threads, {device_description(device)})",
        "",
        "| method | train step median s | train step mean s | inference forward median s |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {median[name]:.3f} | {statistics.mean(times[name]):.3f} | {median_inference[name]:.3f} |"
          for name in methods],
        "",
        f"Train step ratio CMLM-CSE / SimCSE (medians): **{median['CMLM-CSE'] / median['SimCSE']:.2f}x**; "
        f"published-model inference ratio: {median_inference['CMLM-CSE'] / median_inference['SimCSE']:.2f}x.",
    ]
    emit("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
