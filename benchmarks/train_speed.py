"""SimCSE training speed vs sentence-transformers' MultipleNegativesRankingLoss, measured in one run.

Same model (all-MiniLM-L6-v2, mean pooling), batch 64, max length 32, the same wiki sentences, unsupervised pairs
(each sentence with itself; dropout makes the views differ), temperature 0.05 == MNRL scale 20. Both sides are
Hugging Face Trainers; a callback times each optimizer step after warm-up. Rounds alternate between the two so
background load hits both equally. Prints (and with --results appends to RESULTS.md) steps/s and the ratio.

    python benchmarks/train_speed.py [--steps 6] [--rounds 2]
"""

import argparse
import tempfile
import time

from common import interleaved, machine_description, median
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from transformers import AutoTokenizer, TrainerCallback

from csekit.modeling import SimCSEModel
from csekit.trainers.collators import ContrastiveCollator
from csekit.data import read_sentences, resolve_data_dir
from csekit.loading import embedded_minilm_path
from csekit.trainers.recipe import CSETrainingArguments
from csekit.trainers.trainer import SimCSETrainer

BATCH, MAX_LENGTH, WARMUP = 64, 32, 1


class StepTimer(TrainerCallback):
    def __init__(self):
        self.ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

    def seconds_per_step(self) -> float:
        measured = self.ends[WARMUP:]
        return (measured[-1] - measured[0]) / (len(measured) - 1)


def common_args(output_dir, steps):
    return dict(output_dir=output_dir, max_steps=steps, per_device_train_batch_size=BATCH, learning_rate=3e-5,
                logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True,
                dataloader_drop_last=True, disable_tqdm=True, seed=0)


def csekit_run(sentences, steps):
    def run():
        model = SimCSEModel.from_encoder(str(embedded_minilm_path()), pooler_type="avg")
        tokenizer = AutoTokenizer.from_pretrained(embedded_minilm_path())
        timer = StepTimer()
        with tempfile.TemporaryDirectory() as out:
            args = CSETrainingArguments(**common_args(out, steps), load_best_model_at_end=False,
                                        remove_unused_columns=False)
            SimCSETrainer(model=model, args=args, train_dataset=Dataset.from_dict({"sent0": sentences}),
                          data_collator=ContrastiveCollator(tokenizer, max_length=MAX_LENGTH),
                          processing_class=tokenizer, callbacks=[timer]).train()
        return timer.seconds_per_step()

    return run


def sentence_transformers_run(sentences, steps):
    def run():
        model = SentenceTransformer(str(embedded_minilm_path()), device="cpu")
        model.max_seq_length = MAX_LENGTH
        timer = StepTimer()
        with tempfile.TemporaryDirectory() as out:
            args = SentenceTransformerTrainingArguments(**common_args(out, steps))
            dataset = Dataset.from_dict({"anchor": sentences, "positive": sentences})
            SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset,
                                       loss=MultipleNegativesRankingLoss(model, scale=20.0),
                                       callbacks=[timer]).train()
        return timer.seconds_per_step()

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="Optimizer steps per round (first is warm-up).")
    parser.add_argument("--rounds", type=int, default=2, help="Alternating rounds per side.")
    args = parser.parse_args()
    sentences = read_sentences(resolve_data_dir() / "wiki" / "wiki1m_for_simcse.head11914.txt")[: BATCH * args.steps]
    timings = interleaved({"csekit SimCSETrainer": csekit_run(sentences, args.steps),
                           "sentence-transformers MNRL": sentence_transformers_run(sentences, args.steps)},
                          args.rounds)
    ours, theirs = median(timings["csekit SimCSETrainer"]), median(timings["sentence-transformers MNRL"])
    print(f"machine: {machine_description()}")
    for name, values in timings.items():
        print(f"{name}: {', '.join(f'{v:.2f}' for v in values)} s/step")
    print(f"steps/s csekit {1 / ours:.3f}, sentence-transformers {1 / theirs:.3f}, ratio {theirs / ours:.2f}")


if __name__ == "__main__":
    main()
