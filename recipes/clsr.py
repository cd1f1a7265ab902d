"""CLSR training recipe (Qiu, Ding & Chen): a contrastive MLP head on a frozen pretrained encoder.

    accelerate launch recipes/clsr.py [--config recipes/configs/X.yaml] [--key value ...]
    python -m csekit.recipes.clsr [...]                     (installed csekit)

Steps: pool every training sentence once with the frozen encoder (cached on disk, keyed by model + pooling +
data), train the MLP encoder ``e`` + projection ``h`` on the cached vectors (NT-Xent, LARS, warm-up + cosine),
keep the best ``e`` by STS-B dev, save frozen encoder + pooling + ``e`` (loadable with ``AutoModel``,
``trust_remote_code`` and ``csekit evaluate``), and score the 7 STS test sets for the base encoder alone and with
CLSR into OUTPUT_DIR/eval_results.json (test vectors are cached too; ``csekit evaluate OUTPUT_DIR`` gives the same
CLSR scores).

Defaults are the paper's: mean pooling, temperature 0.1, batch 512 pairs, lr 0.5, decay 1e-4, 2000 epochs, 10
warm-up epochs; training data NLI entailment pairs. The optimizer, LARS, is an inferred reading (the paper names
none; it "adopts" SimCLR, which uses LARS). --train_file stsb uses the STS-B train pairs scored >= 4 (the paper's
1,406); a .csv (sent0,sent1) brings your own pairs.

No evaluation sentence enters training: pairs sharing a sentence with any of the 7 STS test sets or with STS-B dev
(model selection) are dropped and counted (--test_overlap drop, the default). STS-B was compiled from the STS
2012-2016 data, so only 181 of the 1,406 STS-B pairs survive, fewer than one batch of 512: pass a smaller
--per_device_train_batch_size (Table 2 goes down to 64) or --test_overlap keep. --test_overlap keep trains on the
paper's selection as published; every score on a set its pairs overlap is then marked contaminated in
eval_results.json ("contaminated"), the printed table (*) and the model card.

--random_init true builds the backbone from its config with random weights (the paper's "mechanics" check on an
untrained BERT).

Several processes (``accelerate launch --num_processes N``): every process pools a contiguous share of each sentence
list the cache does not hold yet (the frozen-encoder pass is the expensive part), the main process stores the whole
entry, and every process reads it. The head, a few small matrix products per step on cached vectors, then trains in
every process alike (same seed, same vectors: the result of one process), and the main process writes the outputs.
"""

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from accelerate import PartialState
from transformers import AutoConfig, set_seed

from csekit.data import resolve_data_dir
from csekit.errors import DataError
from csekit.evaluation.geometry import GeometryEvaluator
from csekit.evaluation.protocol import protocol_record
from csekit.evaluation.sts import DEV_TASKS, STS_TASKS, CachedSTSEvaluator, STSEvaluator, format_sts_table
from csekit.loading import hub_id_of, resolve_model_path
from csekit.methods import Method, get_method
from csekit.modeling import CLSRConfig, CLSRModel
from csekit.preflight import (
    TRAIN_DATA,
    backbone_config,
    check_model_inputs,
    check_not_an_input,
    check_output_dir,
    check_resume,
    find_checkpoint,
    load_tokenizer,
    prepare_decoder_tokenizer,
    read_model_config,
)
from csekit.recipe_run import commit_run, main_guard
from csekit.trainers.arguments import DataArguments, config_kwargs, model_arguments, parse_recipe_args, setup_record
from csekit.trainers.clsr import CLSRTrainer, CLSRTrainingArguments, steps_as_epochs
from csekit.trainers.clsr_data import build_pair_corpus, held_out_sentences, load_positive_pairs, require_full_batch
from csekit.trainers.data import data_fingerprint
from csekit.trainers.embedding_cache import EmbeddingCache
from csekit.trainers.output_dir import RunFolder
from csekit.trainers.runner import check_lengths
from csekit.trainers.trainer import require_finite_weights


@dataclass
class BackboneArguments:
    random_init: bool = field(default=False, metadata={"help": "Random backbone weights from the config (seeded); "
                              "then a --model_name_or_path folder holding only config + tokenizer is enough."})
    random_init_num_layers: Optional[int] = field(
        default=None, metadata={"help": "With --random_init: override the backbone depth (a smaller random BERT)."}
    )


@dataclass
class CLSRDataArguments(DataArguments):
    train_file: str = field(
        default="nli", metadata={"help": "Positive pairs: nli (SNLI dev+test entailment pairs in the data folder), "
                                 "stsb (STS-B train pairs scored >= 4, the paper's 1,406), or a sent0,sent1 .csv "
                                 "(relative paths are also looked up in the data folder)."}
    )
    test_overlap: str = field(
        default="drop", metadata={"choices": ["drop", "keep"], "help": "Pairs sharing a sentence with any of the 7 "
                                  "STS test sets or STS-B dev: drop (default; counted in eval_results.json) or keep "
                                  "(the paper's selection as published; scores on those sets are marked "
                                  "contaminated)."}
    )
    cache_dir: Optional[str] = field(
        default=None, metadata={"help": "Embedding cache folder (default: $CSEKIT_CACHE_DIR or "
                                "~/.cache/csekit/embeddings)."}
    )
    encode_batch_size: int = field(default=128, metadata={"help": "Sentences per frozen-encoder forward pass."})
    torch_threads: Optional[int] = field(
        default=None, metadata={"help": "CPU threads for torch (default: torch's choice; 1 is often faster on a "
                                "machine shared with other jobs)."}
    )


@dataclass
class CLSRRecipe:
    """CLSR's recipe: a head trained on cached vectors of a frozen encoder (this module's docstring says how). It has
    the contrastive recipes' shape (``argument_types``, ``parse``, ``build_model``, ``main``) and their end of run
    ([`commit_run`][csekit.recipe_run.commit_run]); its training loop is
    [`CLSRTrainer`][csekit.trainers.clsr.CLSRTrainer],
    not a ``Trainer``."""

    method: Method
    description: Optional[str] = None
    config_class = CLSRConfig

    @property
    def output_dir(self) -> str:
        return self.method.output_dir

    def argument_types(self) -> tuple:
        return (model_arguments(CLSRConfig), BackboneArguments, CLSRDataArguments, CLSRTrainingArguments)

    def parse(self, argv: Optional[list] = None, prog: Optional[str] = None) -> tuple:
        return parse_recipe_args(self.argument_types(), argv, {"output_dir": self.output_dir}, self.description, prog,
                                 self.method.name)

    def check_backbone(self, args, backbone: BackboneArguments) -> tuple:
        """``(path, tokenizer)`` of ``--model_name_or_path``, checked before any work: a folder with weights (only a
        config with ``--random_init``), a tokenizer that fits it."""
        if backbone.random_init_num_layers is not None and not backbone.random_init:
            raise DataError("--random_init_num_layers needs --random_init true")
        path = resolve_model_path(args.model_name_or_path, require_weights=not backbone.random_init)
        tokenizer = load_tokenizer(args.model_name_or_path, path)
        encoder_config = read_model_config(path)
        # a decoder's tokenizer pads and pools as the saved folder's will (its end-of-sequence token)
        prepare_decoder_tokenizer(tokenizer, backbone_config(encoder_config).get("model_type"), args.pooler_type,
                                  args.model_name_or_path)
        if not backbone.random_init:
            check_model_inputs(args.model_name_or_path, encoder_config, tokenizer, None, "--max_seq_length")
        check_lengths(args, path, tokenizer)  # the published model's --inference_max_length
        # the flags are checked there; a csekit folder continues from its encoder (backbone_config), as every method
        CLSRConfig(encoder_config=backbone_config(encoder_config), **config_kwargs(args, CLSRConfig))
        return path, tokenizer

    def build_model(self, args, backbone: BackboneArguments, seed: int, checked: Optional[tuple] = None) -> CLSRModel:
        """The model: the frozen backbone (pretrained, or random with ``--random_init``), its pooling and a fresh
        ``e`` seeded by ``seed``; ``checked`` is `check_backbone`'s answer when the caller has it."""
        path, tokenizer = checked or self.check_backbone(args, backbone)
        options = config_kwargs(args, CLSRConfig)
        set_seed(seed)  # e's initialisation (and a random backbone's) draw from the global generator
        if not backbone.random_init:
            model = CLSRModel.from_encoder(path, **options)
        else:  # a config (and tokenizer) is all a random backbone needs
            encoder_config = AutoConfig.for_model(**backbone_config(read_model_config(path)))
            if backbone.random_init_num_layers is not None:
                encoder_config.num_hidden_layers = backbone.random_init_num_layers
            model = CLSRModel(CLSRConfig(encoder_config=encoder_config.to_dict(), **options))
            model.config.name_or_path = path
        model.tokenizer = tokenizer
        return model

    def main(self, argv: Optional[list] = None, prog: Optional[str] = None) -> None:
        run_clsr_recipe(self, *self.parse(argv, prog))


def run_clsr_recipe(recipe: "CLSRRecipe", model_args, backbone_args, data_args, training_args) -> None:
    """Pool the pairs' sentences once (cached), train the head, keep the best e by STS-B dev, save the model and
    score the 7 STS test sets for the base encoder alone and with CLSR (see ``recipes/clsr.py``)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if data_args.torch_threads:
        torch.set_num_threads(data_args.torch_threads)
    # without a GPU (or other accelerator) the processes of a multi-process launch join one gloo group on CPU
    state = PartialState(cpu=not torch.accelerator.is_available())
    if not state.is_main_process:  # every process trains the same head; one writes the logs
        training_args = dataclasses.replace(training_args, report_to="none")
    check_not_an_input(training_args.output_dir, "--output_dir", [model_args.model_name_or_path])
    folder = RunFolder(training_args.output_dir, data_args.overwrite_output_dir, main=state.is_main_process)
    resume = find_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)  # resumed by train()
    record = setup_record(recipe.method.config_class.model_type, None, model_args=model_args,
                          backbone_args=backbone_args, data_args=data_args, training_args=training_args)
    check_output_dir(EmbeddingCache(data_args.cache_dir).cache_dir, "--cache_dir")
    data_dir = resolve_data_dir(data_args.data_dir)
    dev = STSEvaluator(data_dir, DEV_TASKS, split="dev")
    test = STSEvaluator(data_dir, STS_TASKS, split="test") if data_args.do_test_eval else None  # read now, not after
    if test is not None:
        GeometryEvaluator(data_dir, isoscore_sentences=[])  # the card's figure reads STS-B train: checked now
    checked = recipe.check_backbone(model_args, backbone_args)
    held_out = held_out_sentences(data_dir)
    first, second = load_positive_pairs(data_args.train_file, data_dir)
    limit = data_args.max_train_samples  # the first N pairs, before the held-out filter
    corpus = build_pair_corpus(first[:limit], second[:limit], held_out, drop=data_args.test_overlap == "drop")
    record[TRAIN_DATA] = data_fingerprint({"sent0": first[:limit], "sent1": second[:limit]})
    accepted = check_resume(resume, record, training_args.resume_accept_changes) if resume else []
    require_full_batch(corpus, training_args.per_device_train_batch_size)  # before the model loads
    training_args = steps_as_epochs(training_args, len(corpus.pairs) // training_args.per_device_train_batch_size)
    model = recipe.build_model(model_args, backbone_args, training_args.seed, checked).to(state.device)
    dev_overlap = [name for name in corpus.contaminated if name.endswith("-dev")]
    if dev_overlap:
        logging.warning("model selection on %s sees training sentences (--test_overlap keep)", ", ".join(dev_overlap))
    folder.acquire(lock=state.is_main_process)
    try:
        run_clsr_training(folder, model, corpus, held_out, dev, test, state, model_args, backbone_args, data_args,
                          training_args, {"checkpoint": resume, "accepted_changes": accepted} if accepted else None,
                          record)
    finally:
        folder.release()


def run_clsr_training(folder: RunFolder, model, corpus, held_out, dev, test, state, model_args, backbone_args,
                      data_args, training_args, resume: Optional[dict] = None, run_record: Optional[dict] = None
                      ) -> None:
    """`run_clsr_recipe` once everything is checked and the output folder is held."""
    cache = EmbeddingCache(data_args.cache_dir)
    start = time.perf_counter()
    train_entry = cache.get(model, corpus.sentences, data_args.encode_batch_size, across_processes=True)
    dev_vectors = cache.get(model, dev.sentences(), data_args.encode_batch_size, across_processes=True).vectors
    dev_evaluator = CachedSTSEvaluator(dev, dev_vectors)
    pooling_seconds = time.perf_counter() - start
    logging.info("%d pairs over %d sentences (%d dropped: they share a sentence with a held-out set); train cache %s "
                 "(%s)", len(corpus.pairs), len(corpus.sentences), corpus.dropped, train_entry.path, train_entry.status)
    trainer = CLSRTrainer(model, training_args, train_entry.vectors, corpus, held_out, dev_evaluator,
                          is_main_process=state.is_main_process, run_record=run_record)
    summary = trainer.train()
    test_vectors = (cache.get(model, test.sentences(), data_args.encode_batch_size, across_processes=True).vectors
                    if test else None)
    if not state.is_main_process:
        return
    require_finite_weights(model, "the final model")

    def save(staging):  # model (tokenizer included), arguments and scores appear in output_dir together
        model.save_pretrained(staging)

    def score() -> tuple:
        record = {
            "model": training_args.output_dir, "base_model": hub_id_of(model_args.model_name_or_path),
            "pooler": model.config.pooler_type, "train_data": data_args.train_file,
            "test_overlap": data_args.test_overlap, "pairs": len(corpus.pairs), "dropped_pairs": corpus.dropped,
            "overlap_pairs": corpus.overlap, "contaminated": corpus.contaminated,
            "pooling_seconds": round(pooling_seconds, 1), "train_cache": train_entry.status, **summary,
            "base_dev_STSBenchmark": dev_evaluator()["STSBenchmark"], "base_pooler": model.config.pooler_type,
        }
        if test is None:
            return record, None
        test_evaluator = CachedSTSEvaluator(test, test_vectors)
        record["base_sts"], record["sts_aggregations"] = test_evaluator(), test_evaluator.evaluate(model.mlp)
        record["sts"] = record["sts_aggregations"][test.aggregation]
        record["protocol"] = protocol_record(model.config.pooler_type, test)
        clsr_row = f"+ CLSR ({data_args.train_file})"
        rows = {f"{model_args.model_name_or_path} ({model.config.pooler_type})": record["base_sts"],
                clsr_row: record["sts"]}
        return record, format_sts_table(rows, title="STS test (Spearman x100)",
                                        contaminated={clsr_row: corpus.contaminated})

    arguments = dict(model_args=model_args, backbone_args=backbone_args, data_args=data_args,
                     training_args=training_args, **({"resume": resume} if resume else {}))
    commit_run(folder, True, save, score, arguments, dict(repo_id=None, data_dir=data_args.data_dir),
               training_args.keep_checkpoints)


RECIPE = CLSRRecipe(get_method("clsr"), description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
