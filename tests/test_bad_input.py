"""Bad input: every command answers one line on stderr, exits with status 2 and writes nothing.

``ROWS`` is docs/reliability.md's "Bad input" table, row for row (``test_reliability_page_table_is_the_rows``): each
row is one case of ``test_bad_input``, run in-process through ``csekit.cli.main`` in a folder holding the inputs
below. An answer is the whole stderr line (transformers' "Loading weights" progress bar aside); ``…`` stands for any
text (a path, a library's own words).
"""

import json
import os
import re
import shlex
import shutil
import socket
import stat
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from conftest import REPO_ROOT, tiny_bert_config
from csekit import cli


class Row(NamedTuple):
    command: str
    input: str
    answer: str


HUB_OFFLINE = ("someone/uncached: not in the local Hugging Face cache (…) and HF_HUB_OFFLINE=1 is set; unset "
               "HF_HUB_OFFLINE to download it")
TRUNCATED = ("truncated/encoder/model.safetensors: truncated or corrupt safetensors file (…); save or download the "
             "model again")
CORRUPT = ("corrupt/encoder/model.safetensors: truncated or corrupt safetensors file (…); save or download the model "
           "again")
NO_CONFIG = "weights-only: model folder has weights but no config.json"
NOT_CSEKIT = ("--output_dir not-csekit: exists and is not a csekit output folder (no training_args.json, checkpoint-* "
              "or csekit config.json); choose another folder or pass --overwrite_output_dir true")
OUTPUT_FOLDER = "--output not-csekit: is a folder; give a file name, e.g. not-csekit/results.json"
EMPTY_CONFIG = ("empty-config/config.json: not valid JSON (Expecting value, line 1 column 1); save or download the "
                "model again")
NO_MODEL_TYPE = ("no-model-type/config.json: no model_type; save the model with transformers' save_pretrained (or add "
                 'e.g. "model_type": "bert")')
REMOTE_CODE = ("remote-code/config.json: model_type 'my-own-model' needs the folder's own code (trust_remote_code), "
               "which csekit never runs; use a model that transformers implements")
PICKLE = ("pickle-only: refused pytorch_model.bin: pickled weights can run code when loaded, and csekit loads "
          "safetensors only; convert them (e.g. model.save_pretrained(folder) in a trusted environment)")
BIG_VOCAB = ("big-vocab: its tokenizer has … tokens but the model's embedding matrix has 100 rows; use the tokenizer "
             "saved with the model")
NO_EPOCHS = "--num_train_epochs 0: no training step would run; give --num_train_epochs > 0 or --max_steps > 0"
LOCKED = ("--output_dir locked: in use by process … on … (locked/.csekit-lock); wait for it to end or choose another "
          "--output_dir (delete the lock file only if that run is gone)")
E = "csekit: error: "
NEVER_CONVERTED = "csekit reads dense sentence embedders only and never converts one family into another"
SPARSE = ("sparse: a sentence-transformers SparseEncoder folder (sparse vocabulary-sized term weights, which its own "
          f"SparseEncoder.encode gives; score it with SparseEncoder or mteb); {NEVER_CONVERTED}")
CROSS = ("cross: a sentence-transformers CrossEncoder folder (it scores a pair of sentences together and gives no "
         f"sentence vector); {NEVER_CONVERTED}")
ROUTER = ("router: a sentence-transformers pipeline (Router) with no model at the folder's root (no config.json); "
          "csekit trains, exports and applies --pooler to a model at the root, and `csekit evaluate` scores this "
          "folder as sentence-transformers loads it")

ROWS = [
    # recipes (see DEFAULTS for the flags the rows add)
    Row("csekit train simcse --model_name_or_path weights-only", "model folder with weights, no `config.json`",
        E + NO_CONFIG),
    Row("csekit train simcse --model_name_or_path truncated", "truncated `model.safetensors`", E + TRUNCATED),
    Row("csekit train simcse --model_name_or_path corrupt", "corrupt `model.safetensors` header", E + CORRUPT),
    Row("csekit train simcse --max_seq_length 0", "length ≤ 0",
        "csekit train simcse: error: argument --max_seq_length: must be an integer >= 1, got '0' "
        "(see csekit train simcse --help)"),
    Row("csekit train simcse --matryoshka_dims 32", "Matryoshka size not below the embedding size",
        E + "invalid model configuration: matryoshka_dims must be sizes between 1 and 31 (below the embedding size 32, "
        "whose term is always there), got [32]"),
    Row("csekit train simcse --per_device_train_batch_size 0", "batch size ≤ 0", "csekit train simcse: error: "
        "argument --per_device_train_batch_size: must be an integer >= 1, got '0' (see csekit train simcse --help)"),
    Row("csekit train simcse --mini_batch_size 0", "mini-batch ≤ 0", "csekit train simcse: error: "
        "argument --mini_batch_size: must be an integer >= 1, got '0' (see csekit train simcse --help)"),
    Row("csekit train simcse --mini_batch_size 4 --mini_batch_tokens 512", "a count and a token budget",
        E + "--mini_batch_size 4 and --mini_batch_tokens 512: gradient caching cuts chunks by a count of examples or "
        "by a token budget; give one"),
    Row("csekit train simcse --torch_compile true --torch_compile_mode reduce-overhead --mini_batch_size 4",
        "CUDA graphs with gradient caching",
        E + "--torch_compile_mode reduce-overhead: CUDA graphs replay one captured call per step, and gradient "
        "caching (--mini_batch_size/--mini_batch_tokens) calls the model several times before its backward; use "
        "--torch_compile_mode default with it"),
    Row("csekit train simcse --duplicate_negatives drop", "unknown choice", "csekit train simcse: error: argument "
        "--duplicate_negatives/--duplicate-negatives: invalid choice: 'drop' (choose from 'keep', 'mask') (see "
        "csekit train simcse --help)"),
    Row("csekit train simcse --train_file bad-utf8.txt", "non-UTF-8 data file",
        E + "bad-utf8.txt:2: not valid UTF-8 (invalid start byte at byte 0)"),
    Row("csekit train simcse --train_file empty.txt", "empty data file",
        E + "empty.txt: no sentences (the file is empty or blank)"),
    Row("csekit train simcse --train_file wrong-columns.csv", "CSV with wrong columns",
        E + "wrong-columns.csv:1: header is 'premise,hypothesis', expected 'sent0,sent1', 'sent0,sent1,hard_neg' or "
        "'sent0,sent1,hard_neg_1,...,hard_neg_k'"),
    Row("csekit train simcse --output_dir not-csekit", "existing folder that is not csekit's", E + NOT_CSEKIT),
    Row("csekit train simcse --pooler_type mean", "unknown pooler",
        E + "invalid model configuration: unknown pooler_type 'mean'…"),
    Row("csekit train simcse --bidirectional true", "bidirectional attention on an encoder",
        E + "invalid model configuration: bidirectional: 'bert' is not a decoder family csekit converts (qwen2, "
        "qwen3, llama, mistral, gemma); an encoder's attention is bidirectional already"),
    Row("csekit train simcse --no_such_flag 1", "unknown flag",
        "csekit train simcse: error: unrecognized arguments: --no_such_flag 1 (see csekit train simcse --help)"),
    Row("csekit train simcse --model_name_or_path someone/uncached", "uncached Hub id, offline", E + HUB_OFFLINE),
    Row("csekit train clsr --model_name_or_path weights-only", "model folder with weights, no `config.json`",
        E + NO_CONFIG),
    Row("csekit train clsr --model_name_or_path truncated", "truncated `model.safetensors`", E + TRUNCATED),
    Row("csekit train clsr --per_device_train_batch_size 0", "batch size ≤ 0",
        "csekit train clsr: error: argument --per_device_train_batch_size: must be an integer >= 1, got '0' "
        "(see csekit train clsr --help)"),
    Row("csekit train clsr --mini_batch_size 4", "gradient caching (does not apply)",
        E + "--mini_batch_size does not apply to clsr: its frozen encoder runs once per sentence outside the steps "
        "and the head trains on cached vectors, so every batch fits whole"),
    Row("csekit train clsr --mini_batch_tokens 512", "gradient caching (does not apply)",
        E + "--mini_batch_tokens does not apply to clsr: its frozen encoder runs once per sentence outside the steps "
        "and the head trains on cached vectors, so every batch fits whole"),
    Row("csekit train clsr --encode_batch_size 0", "batch size ≤ 0",
        "csekit train clsr: error: argument --encode_batch_size: must be an integer >= 1, got '0' "
        "(see csekit train clsr --help)"),
    Row("csekit train clsr --train_file bad-utf8.csv", "non-UTF-8 data file",
        E + "bad-utf8.csv:2: not valid UTF-8 (invalid start byte at byte 0)"),
    Row("csekit train clsr --train_file empty.csv", "empty data file",
        E + "empty.csv: empty file, expected a header 'sent0,sent1[,hard_neg]'"),
    Row("csekit train clsr --train_file wrong-columns.csv", "CSV with wrong columns",
        E + "wrong-columns.csv:1: header is 'premise,hypothesis', expected 'sent0,sent1', 'sent0,sent1,hard_neg' or "
        "'sent0,sent1,hard_neg_1,...,hard_neg_k'"),
    Row("csekit train clsr --output_dir not-csekit", "existing folder that is not csekit's", E + NOT_CSEKIT),
    Row("csekit train clsr --pooler_type mean", "unknown pooler",
        E + "invalid model configuration: unknown pooler_type 'mean'…"),
    Row("csekit train clsr --model_name_or_path someone/uncached", "uncached Hub id, offline", E + HUB_OFFLINE),
    # evaluate
    Row("csekit evaluate weights-only", "model folder with weights, no `config.json`", E + NO_CONFIG),
    Row("csekit evaluate truncated", "truncated `model.safetensors`", E + TRUNCATED),
    Row("csekit evaluate other-pooling", "a csekit folder whose sentence-transformers files say another pooling",
        E + 'other-pooling: 1_Pooling/config.json pooling_mode is "cls" where the config gives "mean", so '
        "SentenceTransformer(folder) would load another model than this config; save the model again with csekit"),
    Row("csekit evaluate corrupt", "corrupt `model.safetensors` header", E + CORRUPT),
    Row("csekit evaluate tiny --max-length 0", "length ≤ 0", "csekit evaluate: error: argument --max-length: must be "
        "an integer >= 1, got '0' (see csekit evaluate --help)"),
    Row("csekit evaluate tiny --batch-size 0", "batch size ≤ 0", "csekit evaluate: error: argument --batch-size: must "
        "be an integer >= 1, got '0' (see csekit evaluate --help)"),
    Row("csekit evaluate tiny --pooler mean", "unknown pooler",
        E + "unknown pooler 'mean'; choose one of cls, cls_before_pooler, avg, avg_first_last, avg_top2, layers, "
        "last_token, weighted_avg"),
    Row("csekit evaluate tiny --truncate-dim 33", "size over the model's vector size",
        E + "--truncate-dim 33: tiny returns 32-dimensional vectors"),
    Row("csekit evaluate tiny --backend onnx", "not an ONNX export",
        E + "tiny: not an ONNX export (needs model.onnx and onnx_export.json; write one with `csekit export-onnx MODEL "
        "OUT`)"),
    Row("csekit evaluate tiny --mteb STS12", "MTEB task whose data is not cached, offline",
        E + "--mteb STS12: its data (mteb/sts12-sts) cannot be read: …; the task data comes from the Hub through the "
        "Hugging Face datasets cache: run once online, then HF_HUB_OFFLINE=1 works"),
    Row("csekit evaluate tiny --tasks sts,bogus", "unknown suite",
        E + "unknown task suite(s) bogus; choose from sts, transfer, clustering, geometry"),
    Row("csekit evaluate tiny --output not-csekit", "output file that is a folder", E + OUTPUT_FOLDER),
    Row("csekit evaluate tiny --data-dir missing", "missing data folder",
        E + "no data folder found (tried: missing); pass --data-dir, set CSEKIT_DATA_DIR, or run "
        "`csekit download senteval`"),
    Row("csekit evaluate someone/uncached", "uncached Hub id, offline", E + HUB_OFFLINE),
    # extract (the rows add --models tiny)
    Row("csekit extract --models weights-only", "model folder with weights, no `config.json`", E + NO_CONFIG),
    Row("csekit extract --models truncated", "truncated `model.safetensors`", E + TRUNCATED),
    Row("csekit extract --max-length 0", "length ≤ 0",
        "csekit extract: error: argument --max-length: must be an integer >= 1, got '0' (see csekit extract --help)"),
    Row("csekit extract --batch-size 0", "batch size ≤ 0",
        "csekit extract: error: argument --batch-size: must be an integer >= 1, got '0' (see csekit extract --help)"),
    Row("csekit extract --reference bad-utf8.txt", "non-UTF-8 data file",
        E + "bad-utf8.txt:2: not valid UTF-8 (invalid start byte at byte 0)"),
    Row("csekit extract --reference empty.txt", "empty data file",
        E + "empty.txt: no sentences (the file is empty or blank)"),
    Row("csekit extract --tasks bogus", "unknown suite", E + "unknown task suite(s) bogus; choose from …"),
    Row("csekit extract --sts-tasks STS99", "unknown STS task", E + "unknown STS task(s) STS99; choose from …"),
    Row("csekit extract --aggregations bogus", "unknown aggregation",
        E + "unknown aggregation(s) bogus; choose from …"),
    Row("csekit extract --layers bogus", "unknown layer spec", E + "bad layer spec 'bogus': use …"),
    Row("csekit extract --postprocessing bogus", "unknown post-processing step",
        E + "unknown post-processing step 'bogus'; choose from …"),
    Row("csekit extract --output not-csekit", "output file that is a folder", E + OUTPUT_FOLDER),
    Row("csekit extract --models someone/uncached", "uncached Hub id, offline", E + HUB_OFFLINE),
    # card
    Row("csekit card weights-only", "model folder with weights, no `config.json`", E + NO_CONFIG),
    Row("csekit card truncated", "truncated `model.safetensors`", E + TRUNCATED),
    Row("csekit card bert", "model folder without `eval_results.json`",
        E + "bert/eval_results.json: no such file; train with a csekit recipe or run `csekit evaluate bert --output "
        "bert/eval_results.json` first"),
    Row("csekit card tiny --output not-csekit", "output file that is a folder", E + OUTPUT_FOLDER),
    Row("csekit card tiny --figure sometimes", "unknown choice",
        "csekit card: error: argument --figure: invalid choice: 'sometimes' (choose from …) (see csekit card --help)"),
    Row("csekit card someone/uncached --output card.md", "uncached Hub id, offline", E + HUB_OFFLINE),
    # push
    Row("csekit push weights-only me/model --dry-run", "model folder with weights, no `config.json`",
        E + "weights-only: not a model folder (no config.json)"),
    Row("csekit push truncated me/model --dry-run", "truncated `model.safetensors`", E + TRUNCATED),
    Row("csekit push bert me/model --dry-run", "not a csekit model folder",
        E + "bert/config.json has no auto_map for AutoConfig/AutoModel; save it with csekit (import csekit first) so "
        "it loads with trust_remote_code"),
    Row("csekit push tiny noslash", "bad repository id", E + "repo id must look like 'namespace/name', got 'noslash'"),
    Row("csekit push tiny me/model", "offline",
        E + "HF_HUB_OFFLINE is set, so the Hub cannot be reached; unset it to push"),
    # export-st
    Row("csekit export-st weights-only st", "model folder with weights, no `config.json`", E + NO_CONFIG),
    Row("csekit export-st truncated st", "truncated `model.safetensors`", E + TRUNCATED),
    Row("csekit export-st bert st", "not a csekit model", E + "bert: not a csekit model (model_type 'bert')"),
    Row("csekit export-onnx bert onnx", "no sentence-transformers modules",
        E + "bert: no sentence-transformers modules (modules.json): its pooling is not recorded; export-onnx exports a "
        "folder SentenceTransformer loads as it is"),
    Row("csekit export-st tiny not-csekit", "existing output folder",
        E + "not-csekit already exists (pass --overwrite to replace it)"),
    Row("csekit export-st tiny st --layout fancy", "unknown choice",
        "csekit export-st: error: argument --layout: invalid choice: 'fancy' (choose from …) "
        "(see csekit export-st --help)"),
    Row("csekit export-st someone/uncached st", "uncached Hub id, offline", E + HUB_OFFLINE),
    # mine
    Row("csekit mine tiny --pairs pairs.csv --output mined.csv --relative_margin 1.5", "margin outside its range",
        E + "--relative_margin 1.5: must be in [0, 1] (a share of the positive's score)"),
    Row("csekit mine tiny --pairs pairs.csv --output mined.csv --num_negatives 100",
        "corpus smaller than --num_negatives",
        E + "--num_negatives 100: the candidates (positives and --corpus) hold 70 distinct text(s), too few "
        "to give each anchor 100 other than its positive"),
    Row("csekit mine tiny --pairs sentences.txt --output mined.csv", "sentences, not pairs",
        E + "--pairs sentences.txt: one sentence a row; mining needs sent0,sent1 pairs"),
    Row("csekit mine tiny --pairs pairs.csv --output pairs.csv", "output file exists",
        E + "--output pairs.csv: exists; give --overwrite to replace it"),
    # download
    Row("csekit download wiki2m --data-dir data", "unknown corpus",
        "csekit download: error: argument NAME: invalid choice: 'wiki2m' (choose from …) (see csekit download --help)"),
    Row("csekit download nli --data-dir data", "not cached, offline",
        E + "nli_for_simcse.csv: not in the local Hugging Face cache and HF_HUB_OFFLINE=1 is set; "
        "`csekit download nli` fetches it (49 MB) on a machine that reaches the Hub"),
    # checked before work: the model with its tokenizer (every command), hyper-parameters, outputs, resume, YAML
    Row("csekit train simcse --model_name_or_path empty-config", "empty `config.json`", E + EMPTY_CONFIG),
    Row("csekit train simcse --model_name_or_path bad-json-config", "`config.json` that is not JSON",
        E + "bad-json-config/config.json: not valid JSON (Expecting property name enclosed in double quotes, line 1 "
        "column 2); save or download the model again"),
    Row("csekit train simcse --model_name_or_path no-model-type", "`config.json` without `model_type`",
        E + NO_MODEL_TYPE),
    Row("csekit train simcse --model_name_or_path remote-code", "model that needs its own code", E + REMOTE_CODE),
    Row("csekit train simcse --model_name_or_path pickle-only", "pickled weights only", E + PICKLE),
    Row("csekit train simcse --model_name_or_path big-vocab", "tokenizer larger than the embedding matrix",
        E + BIG_VOCAB),
    Row("csekit train simcse --model_name_or_path short-positions", "position embeddings shorter than the length",
        E + "short-positions: inputs of 32 tokens need 32 position embeddings, the model has 8; pass "
        "--max_seq_length 8 or less"),
    Row("csekit train simcse --learning_rate -1", "negative learning rate",
        E + "--learning_rate -1: must be > 0 (at 0 no update changes the model)"),
    # runs that cannot learn: no negative for an anchor, no update, no word in a sentence, an unusable published length
    Row("csekit train simcse --learning_rate 0", "zero learning rate",
        E + "--learning_rate 0: must be > 0 (at 0 no update changes the model)"),
    Row("csekit train simcse --per_device_train_batch_size 1", "one example per step",
        E + "--per_device_train_batch_size 1 x 1 process(es): each anchor would see no negative, so the contrastive "
        "loss is constant and nothing trains; use 2 or more examples per step"),
    Row("csekit train simcse --train_file same.txt --duplicate_negatives mask", "every in-batch candidate a masked "
        "copy", E + "--duplicate_negatives mask: every in-batch candidate of this data is a copy of its anchor or "
        "positive, so every step's loss is 0 and nothing trains; train on more than one distinct text, or use "
        "--duplicate_negatives keep"),
    Row("csekit train whitenedcse --per_device_train_batch_size 1", "one example per step",
        E + "--per_device_train_batch_size 1 x 1 process(es): each anchor would see no negative, so the contrastive "
        "loss is constant and nothing trains; use 2 or more examples per step"),
    Row("csekit train clsr --per_device_train_batch_size 1", "one pair per step",
        E + "--per_device_train_batch_size 1: a batch of one pair gives its anchors no negative, so the contrastive "
        "loss is constant and nothing trains; use 2 or more"),
    Row("csekit train simcse --max_seq_length 2", "a length of special tokens only",
        E + "--max_seq_length 2: leaves no room for a word after the tokenizer's 2 special tokens; give "
        "--max_seq_length 3 or more"),
    Row("csekit evaluate tiny --max-length 2", "a length of special tokens only",
        E + "--max-length 2: leaves no room for a word after the tokenizer's 2 special tokens; give --max-length 3 or "
        "more"),
    Row("csekit train simcse --inference_max_length 600", "published length beyond the positions",
        E + "bert: inputs of 600 tokens need 600 position embeddings, the model has 512; pass --inference_max_length "
        "512 or less"),
    Row("csekit train clsr --inference_max_length 600", "published length beyond the positions",
        E + "bert: inputs of 600 tokens need 600 position embeddings, the model has 512; pass --inference_max_length "
        "512 or less"),
    Row("csekit train simcse --gradient_accumulation_steps 0", "no accumulation step",
        E + "--gradient_accumulation_steps 0: must be 1 or more (1 = no accumulation)"),
    Row("csekit train simcse --num_train_epochs 0", "no training step", E + NO_EPOCHS),
    Row("csekit train simcse --resume_from_checkpoint nosuch", "missing resume folder",
        E + "--resume_from_checkpoint nosuch: no such folder; give a checkpoint-N folder or 'last'"),
    Row("csekit train simcse --output_dir trained --resume_from_checkpoint last", "`last` without a checkpoint",
        E + "--resume_from_checkpoint last: no complete checkpoint in trained; start without --resume_from_checkpoint"),
    Row("csekit train simcse --output_dir trained --resume_from_checkpoint trained/checkpoint-2",
        "incomplete checkpoint", E + "--resume_from_checkpoint trained/checkpoint-2: incomplete checkpoint (no "
        "trainer_state.json); give another one or 'last'"),
    Row("csekit train simcse --config bad.yaml", "YAML syntax error",
        "csekit train simcse: error: --config bad.yaml: not valid YAML (line 2: …) (see csekit train simcse --help)"),
    Row("csekit train simcse --config list.yaml", "YAML holding a list",
        "csekit train simcse: error: --config list.yaml: holds a list; write one 'flag: value' line per setting (e.g. "
        "learning_rate: 3.0e-5) (see csekit train simcse --help)"),
    Row("csekit train simcse --train_file a-folder", "folder as training file",
        E + "a-folder: is a folder; give a file (one sentence a line, or sent0,sent1 CSV rows)"),
    Row("csekit train simcse --output_dir afile/sub", "output folder under a file",
        E + "--output_dir afile/sub: afile is a file, not a folder; choose another path"),
    Row("csekit train simcse --output_dir /proc/csekit-out", "output folder that cannot be written",
        E + "--output_dir /proc/csekit-out: cannot write in /proc (…); choose a folder you can write to"),
    Row("csekit train simcse --output_dir locked", "output folder another run holds", E + LOCKED),
    Row("csekit train simcse --data_dir partial-data", "an STS test file missing (read at the end of the run)",
        E + "partial-data/senteval/downstream/STS/STS16-en-test/STS.input.…: no such file (an incomplete SentEval "
        "folder: run `csekit download senteval` again)"),
    Row("csekit train simcse --data_dir a-folder", "a data folder without SentEval",
        E + "a-folder: no SentEval data (senteval/downstream); run `csekit download senteval --data-dir a-folder`, or "
        "pass --data_dir with the folder that holds it"),
    Row("csekit train simcse --data_dir missing", "missing data folder",
        E + "no data folder found (tried: missing); pass --data-dir, set CSEKIT_DATA_DIR, or run "
        "`csekit download senteval`"),
    Row("csekit train clsr --model_name_or_path empty-config", "empty `config.json`", E + EMPTY_CONFIG),
    Row("csekit train clsr --model_name_or_path remote-code", "model that needs its own code", E + REMOTE_CODE),
    Row("csekit train clsr --model_name_or_path pickle-only", "pickled weights only", E + PICKLE),
    Row("csekit train clsr --model_name_or_path big-vocab", "tokenizer larger than the embedding matrix",
        E + BIG_VOCAB),
    Row("csekit train clsr --learning_rate -1", "negative learning rate",
        E + "--learning_rate -1: must be > 0 (at 0 no update changes the model)"),
    Row("csekit train clsr --num_train_epochs 0", "no training step", E + NO_EPOCHS),
    Row("csekit train clsr --resume_from_checkpoint nosuch", "missing resume folder",
        E + "--resume_from_checkpoint nosuch: no such folder; give a checkpoint-N folder or 'last'"),
    Row("csekit train clsr --config bad.yaml", "YAML syntax error",
        "csekit train clsr: error: --config bad.yaml: not valid YAML (line 2: …) (see csekit train clsr --help)"),
    Row("csekit train clsr --output_dir afile/sub", "output folder under a file",
        E + "--output_dir afile/sub: afile is a file, not a folder; choose another path"),
    Row("csekit train clsr --output_dir locked", "output folder another run holds", E + LOCKED),
    Row("csekit evaluate empty-config", "empty `config.json`", E + EMPTY_CONFIG),
    Row("csekit evaluate remote-code", "model that needs its own code", E + REMOTE_CODE),
    Row("csekit evaluate pickle-only", "pickled weights only", E + PICKLE),
    Row("csekit evaluate big-vocab", "tokenizer larger than the embedding matrix", E + BIG_VOCAB),
    Row("csekit evaluate short-positions --max-length 32", "position embeddings shorter than the length",
        E + "short-positions: inputs of 32 tokens need 32 position embeddings, the model has 8; pass --max-length 8 or "
        "less"),
    Row("csekit evaluate tiny --output /proc/csekit/results.json", "output file that cannot be written",
        E + "--output /proc/csekit/results.json: cannot write in /proc (…); choose a folder you can write to"),
    Row("csekit evaluate tiny --output afile/results.json", "output file under a file",
        E + "--output afile/results.json: afile is a file, not a folder; choose another path"),
    Row("csekit extract --models empty-config", "empty `config.json`", E + EMPTY_CONFIG),
    Row("csekit extract --models no-model-type", "`config.json` without `model_type`", E + NO_MODEL_TYPE),
    Row("csekit extract --models remote-code", "model that needs its own code", E + REMOTE_CODE),
    Row("csekit extract --models big-vocab", "tokenizer larger than the embedding matrix", E + BIG_VOCAB),
    Row("csekit extract --output /proc/csekit/grid.json", "output file that cannot be written",
        E + "--output /proc/csekit/grid.json: cannot write in /proc (…); choose a folder you can write to"),
    Row("csekit card empty-config", "empty `config.json`", E + EMPTY_CONFIG),
    Row("csekit export-st tiny /proc/csekit-st", "output folder that cannot be written",
        E + "OUT_DIR /proc/csekit-st: cannot write in /proc (…); choose a folder you can write to"),
    Row("csekit export-st tiny afile/st", "output folder under a file",
        E + "OUT_DIR afile/st: afile is a file, not a folder; choose another path"),
    Row("csekit export-st empty-config st", "empty `config.json`", E + EMPTY_CONFIG),
    # finite or refused: every float setting, from the command line, a YAML file or a model folder's config.json
    Row("csekit train simcse --learning_rate nan", "NaN learning rate",
        E + "--learning_rate nan: must be a finite number"),
    Row("csekit train simcse --temperature inf", "infinite method setting",
        E + "--temperature inf: must be a finite number"),
    Row("csekit train simcse --max_grad_norm inf", "infinite training setting",
        E + "--max_grad_norm inf: must be a finite number"),
    Row("csekit train simcse --config nan.yaml", "NaN in YAML (`.nan`)",
        E + "--weight_decay nan: must be a finite number"),
    Row("csekit train cmlm_cse --mlm_weight nan", "NaN loss weight", E + "--mlm_weight nan: must be a finite number"),
    Row("csekit train clsr --lars_momentum nan", "NaN momentum", E + "--lars_momentum nan: must be a finite number"),
    Row("csekit evaluate nan-config", "NaN in a csekit `config.json`",
        E + "invalid model configuration: temperature must be a finite number, got nan"),
    Row("csekit train simcse --config list-number.yaml", "YAML list where a number goes",
        "csekit train simcse: error: --config list-number.yaml: learning_rate: expected one value, got a list (see "
        "csekit train simcse --help)"),
    Row("csekit train simcse --config map-number.yaml", "YAML mapping where a number goes",
        "csekit train simcse: error: --config map-number.yaml: max_steps: expected one value, got a dict (see "
        "csekit train simcse --help)"),
    Row("csekit train simcse --config word-number.yaml", "YAML word where a number goes",
        "csekit train simcse: error: --config word-number.yaml: max_steps: invalid value 'ten' (see csekit train "
        "simcse --help)"),
    Row("csekit train simcse --config null-number.yaml", "YAML null where a number goes",
        "csekit train simcse: error: --config null-number.yaml: learning_rate: null, but it takes a value (default "
        "3e-05); remove the line to keep the default (see csekit train simcse --help)"),
    Row("csekit train simcse --seed -1", "seed numpy cannot take", E + "--seed -1: must be between 0 and 4294967295"),
    Row("csekit evaluate nan-weights", "model whose weights hold NaN",
        E + "nan-weights: … sentence embeddings hold NaN or infinite values; no score is reported (check the model's "
        "weights and that it is a supported encoder)"),
    # a tokenizer that fits the model
    Row("csekit train simcse --model_name_or_path no-tokenizer", "model folder without tokenizer files",
        E + "no-tokenizer: no tokenizer files (tokenizer.json, vocab.txt, vocab.json, *.model, spm.model) in "
        "no-tokenizer; save the tokenizer with the model (tokenizer.save_pretrained(folder))"),
    Row("csekit evaluate no-tokenizer", "model folder without tokenizer files",
        E + "no-tokenizer: no tokenizer files …"),
    Row("csekit extract --models no-tokenizer", "model folder without tokenizer files",
        E + "no-tokenizer: no tokenizer files …"),
    Row("csekit card no-tokenizer", "model folder without tokenizer files", E + "no-tokenizer: no tokenizer files …"),
    Row("csekit train simcse --model_name_or_path unk-tokenizer", "tokenizer that knows no word of the probe",
        E + "unk-tokenizer: its tokenizer turns the probe sentence 'A man is playing a guitar on the street.' into "
        "unknown tokens only (… tokens in its vocabulary); save the model's own tokenizer with it"),
    Row("csekit evaluate unk-tokenizer", "tokenizer that knows no word of the probe",
        E + "unk-tokenizer: its tokenizer turns the probe sentence … into unknown tokens only …"),
    Row("csekit evaluate damaged-tokenizer", "`tokenizer.json` that is not a tokenizer",
        E + "damaged-tokenizer: cannot load its tokenizer (KeyError: 'added_tokens'); save the tokenizer with the "
        "model"),
    # backbones: supported or refused
    Row("csekit train simcse --model_name_or_path gpt2", "untested decoder family",
        E + "gpt2/config.json: model_type 'gpt2' is a decoder-only (causal) family csekit has not been tested on; "
        "csekit trains and evaluates the encoder families bert, roberta, xlm-roberta, camembert, distilbert, electra, "
        "albert, mpnet, deberta-v2, modernbert and the decoder families qwen2, qwen3, llama, mistral, gemma "
        "(docs/training.md: Backbones)"),
    Row("csekit evaluate gpt2", "untested decoder family",
        E + "gpt2/config.json: model_type 'gpt2' is a decoder-only (causal) family …"),
    Row("csekit extract --models t5", "encoder-decoder backbone",
        E + "t5/config.json: model_type 't5' is an encoder-decoder model; csekit trains and evaluates …"),
    Row("csekit train simcse --model_name_or_path bert-as-decoder", "encoder configured as a decoder",
        E + "bert-as-decoder/config.json: model_type 'bert' is configured as a decoder (is_decoder: causal "
        "attention); csekit trains and evaluates …"),
    Row("csekit train clsr --model_name_or_path t5", "encoder-decoder backbone",
        E + "t5/config.json: model_type 't5' is an encoder-decoder model; …"),
    # resume: the uninterrupted run's setup, a csekit checkpoint
    Row("csekit train simcse --output_dir resumable --resume_from_checkpoint resumable/checkpoint-2",
        "checkpoint of another batch size", E + "--resume_from_checkpoint resumable/checkpoint-2: the checkpoint was "
        "made with another setup (--per_device_train_batch_size 16 -> 64); resume with its settings, or pass "
        "--resume_accept_changes true to continue anyway (the run records it)"),
    Row("csekit train whitenedcse --output_dir resumable --resume_from_checkpoint resumable/checkpoint-2",
        "checkpoint of another method", E + "--resume_from_checkpoint resumable/checkpoint-2: the checkpoint was made "
        "with another setup (method csekit-simcse -> csekit-whitenedcse; --per_device_train_batch_size 16 -> 64); …"),
    Row("csekit train simcse --resume_from_checkpoint foreign/checkpoint-2", "checkpoint csekit did not write",
        E + "--resume_from_checkpoint foreign/checkpoint-2: not a csekit checkpoint (no csekit_run.json); give a "
        "checkpoint-N folder that a csekit run of this method wrote, or start without it"),
    # training arguments that would fail later, or silently
    Row("csekit train simcse --save_steps 0", "no step between checkpoints",
        E + "--save_steps 0: must be > 0 (a step count, or a fraction of the run below 1)"),
    Row("csekit train simcse --eval_steps 0", "no step between evaluations",
        E + "--eval_steps 0: must be > 0 (a step count, or a fraction of the run below 1)"),
    Row("csekit train simcse --report_to bogus", "unknown logger",
        E + "--report_to bogus: unknown; use none or one of …"),
    Row("csekit train simcse --dataloader_num_workers -1", "negative worker count",
        E + "--dataloader_num_workers -1: must be 0 or more (0 = load in the main process)"),
    Row("csekit train cmlm_cse --dataloader_num_workers 1 --dataloader_persistent_workers true",
        "workers kept across epochs with random collator draws", E + "--dataloader_persistent_workers: workers kept "
        "across epochs would collate every epoch with the first epoch's random draws; leave it off"),
    # data that does not fit the method
    Row("csekit train whitenedcse --train_file triplets.csv", "supervised triplets for an unsupervised method",
        E + "triplets.csv: columns sent0,sent1,hard_neg, but whitenedcse trains on sent0 (a .txt is one sentence a "
        "line)"),
    Row("csekit train whitenedcse --train_file ntuples.csv", "k hard negatives a row for an unsupervised method",
        E + "ntuples.csv: columns sent0,sent1,hard_neg_1,hard_neg_2, but whitenedcse trains on sent0 (a .txt is one "
        "sentence a line)"),
    Row("csekit train simcse --train_file gap-ntuples.csv", "hard negatives numbered with a gap",
        E + "gap-ntuples.csv:1: header is 'sent0,sent1,hard_neg_1,hard_neg_3', expected 'sent0,sent1', "
        "'sent0,sent1,hard_neg' or 'sent0,sent1,hard_neg_1,...,hard_neg_k'"),
    Row("csekit train simcse --train_file mixed-ntuples.csv", "hard_neg beside numbered hard negatives",
        E + "mixed-ntuples.csv:1: header is 'sent0,sent1,hard_neg,hard_neg_1', expected 'sent0,sent1', "
        "'sent0,sent1,hard_neg' or 'sent0,sent1,hard_neg_1,...,hard_neg_k'"),
    Row("csekit train cmlm_cse --train_file pairs.csv", "pairs for an unsupervised method",
        E + "pairs.csv: columns sent0,sent1, but cmlm_cse trains on sent0 (a .txt is one sentence a line)"),
    Row("csekit train simcse --train_file sentences.txt --train_file pairs.csv --dataset_prompts 'nli.csv=query: '",
        "a prompt for a dataset not trained on",
        E + "--dataset_prompts nli.csv: not one of the datasets (sentences.txt, pairs.csv)"),
    Row("csekit train simcse --dataset_prompts 'sentences.txt=query: '", "a dataset's prompt with one dataset",
        E + "--dataset_prompts names datasets of several (a dict of them, or --train_file given more than once); for "
        "one dataset give the model's --prompt"),
    # caches, records
    Row("csekit train clsr --cache_dir afile", "cache folder that is a file",
        E + "--cache_dir afile: is a file, not a folder"),
    Row("csekit extract --cache-dir afile", "cache folder that is a file",
        E + "--cache-dir afile: is a file, not a folder"),
    Row("csekit card list-results", "`eval_results.json` that is not an object",
        E + "list-results/eval_results.json: holds a JSON list, not the object csekit writes; train with a csekit "
        "recipe or run `csekit evaluate` again"),
    Row("csekit card crafted-average", "`eval_results.json` whose average is not the mean of its scores",
        E + "crafted-average/eval_results.json: 'sts' avg 90.0 is not the mean of its tasks (1.00); csekit writes no "
        "such record (run `csekit evaluate crafted-average --output crafted-average/eval_results.json` again)"),
    Row("csekit card crafted-score", "`eval_results.json` with a score that is not finite",
        E + "crafted-score/eval_results.json: 'base_sts' STS12: nan is not a score (a finite number in [-100, 100]); "
        "csekit writes no such record (run `csekit evaluate crafted-score --output crafted-score/eval_results.json` "
        "again)"),
    Row("csekit card crafted-base", "`eval_results.json` naming a local folder as the base model",
        E + "crafted-base/eval_results.json: 'base_model' '/home/someone/bert' is not a Hub id (a local model is "
        "recorded as null); csekit writes no such record (run `csekit evaluate crafted-base --output "
        "crafted-base/eval_results.json` again)"),
    Row("csekit card outside-module --figure never", "a `modules.json` entry whose path leaves the folder",
        E + "outside-module/modules.json: module 1: path '../tiny/1_Pooling' is not a sub-folder of the model folder; "
        "refused"),
    Row("csekit card pathless-module --figure never", "a `modules.json` entry without a path",
        E + "pathless-module/modules.json: module 1 (Pooling) has no path; refused (save the model again with "
        "sentence-transformers)"),
    Row("csekit compare not-results.json", "JSON that is not a csekit results record",
        E + "not-results.json: not a csekit results record (no sts, transfer, clustering, mteb scores); give a model "
        "folder with eval_results.json or the JSON of `csekit evaluate --output`"),
    # destructive commands: an output that is its own input, a repository id checked before anything is written
    Row("csekit export-st tiny tiny --overwrite", "export over its own source",
        E + "OUT_DIR tiny: would overwrite the input tiny (the output is the input, lies in it or holds it); choose "
        "another path"),
    Row("csekit evaluate tiny --output tiny/config.json", "results over a file of the model",
        E + "--output tiny/config.json: would overwrite the input tiny (…); choose another path"),
    Row("csekit train simcse --model_name_or_path tiny --output_dir tiny", "output folder that is the backbone",
        E + "--output_dir tiny: would overwrite the input tiny (…); choose another path"),
    Row("csekit card tiny --repo-id me/bad--", "invalid repository id",
        E + "repo id 'me/bad--' is not a valid Hub repository id (…)"),
    Row("csekit push tiny me/bad-- --dry-run", "invalid repository id",
        E + "repo id 'me/bad--' is not a valid Hub repository id (…)"),
    # sentence-transformers folders of another family, or that need a model at the root
    Row("csekit evaluate sparse --tasks sts", "a SparseEncoder (SPLADE) folder", E + SPARSE),
    Row("csekit evaluate cross --tasks sts", "a CrossEncoder folder", E + CROSS),
    Row("csekit train simcse --model_name_or_path cross", "a CrossEncoder folder as backbone", E + CROSS),
    Row("csekit train simcse --model_name_or_path router", "a Router pipeline as backbone", E + ROUTER),
    Row("csekit evaluate no-path --tasks sts", "a `modules.json` entry without a path",
        E + "no-path/modules.json: module 1 (Pooling) has no path; refused (save the model again with "
        "sentence-transformers)"),
]

# flags a row's command gets unless it gives them (the table stays readable)
DEFAULTS = {
    "csekit train simcse": ["--model_name_or_path", "bert", "--train_file", "sentences.txt", "--output_dir", "out"],
    "csekit train whitenedcse": ["--model_name_or_path", "bert", "--train_file", "sentences.txt", "--output_dir",
                                 "out"],
    "csekit train cmlm_cse": ["--model_name_or_path", "bert", "--train_file", "sentences.txt", "--output_dir", "out",
                              "--extractor_layers", "1", "--fusion_layers", "1"],
    "csekit train clsr": ["--model_name_or_path", "bert", "--train_file", "pairs.csv", "--output_dir", "out",
                          "--cache_dir", "cache"],
    "csekit extract": ["--models", "tiny"],
}


def argv_of(command: str) -> list:
    words = shlex.split(command)
    for prefix, defaults in DEFAULTS.items():
        if command.startswith(prefix):
            for flag, value in zip(defaults[::2], defaults[1::2]):
                if flag not in words:
                    words += [flag, value]
    return words[1:]  # without "csekit"


def markdown_code(text: str) -> str:
    text = text.replace("|", "\\|")  # a table cell
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table_lines() -> list:
    lines = ["| command | input | what it answers (stderr, one line) | exit |", "|---|---|---|---|"]
    return lines + [f"| {markdown_code(row.command)} | {row.input} | {markdown_code(row.answer)} | 2 |" for row in ROWS]


def test_reliability_page_table_is_the_rows():
    readme = (REPO_ROOT / "docs" / "reliability.md").read_text().splitlines()
    start = readme.index("## Bad input")
    section = readme[start + 1 : next((i for i in range(start + 1, len(readme)) if readme[i].startswith("## ")),
                                      len(readme))]
    table = [line for line in section if line.startswith("|")]
    assert table == table_lines()


# ------------------------------------------------------------------------------------------------ the inputs
@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tokenizer, data_dir):
    from transformers import BertModel, BertTokenizerFast, GPT2Config, GPT2Model, T5Config, T5Model

    from csekit.modeling import SimCSEConfig, SimCSEModel

    folder = tmp_path_factory.mktemp("bad_input")
    tiny = folder / "tiny"
    config = SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(), pooler_type="avg")
    model = SimCSEModel(config)
    model.tokenizer = tokenizer
    model.save_pretrained(tiny)
    scores = dict.fromkeys(("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"), 1.0)
    (tiny / "eval_results.json").write_text(json.dumps({"model": "tiny", "pooler": "avg", "sts": scores}))
    (tiny / "README.md").write_text("card\n")
    BertModel(tiny_bert_config(max_position_embeddings=512)).save_pretrained(folder / "bert")
    tokenizer.save_pretrained(folder / "bert")
    copy_folder(folder / "bert", folder / "weights-only")  # (a csekit folder less config.json is a pipeline)
    for name in ("truncated", "corrupt"):
        copy_folder(tiny, folder / name)
    (folder / "weights-only" / "config.json").unlink()
    weights = (folder / "truncated" / "encoder" / "model.safetensors").read_bytes()  # the backbone's weights
    (folder / "truncated" / "encoder" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (folder / "corrupt" / "encoder" / "model.safetensors").write_bytes(weights[:8] + b"#" * 32 + weights[40:])
    (folder / "sentences.txt").write_text("".join(f"sentence number {i}\n" for i in range(70)))
    (folder / "same.txt").write_text("the same sentence\n" * 70)
    copy_folder(tiny, folder / "other-pooling")  # its sentence-transformers pooling edited, its config not
    pooling = folder / "other-pooling" / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "pooling_mode": "cls"}))
    (folder / "pairs.csv").write_text("sent0,sent1\n" + "".join(f"first {i},second {i}\n" for i in range(70)))
    (folder / "bad-utf8.txt").write_bytes(b"fine\n\xff not utf-8\n")
    (folder / "bad-utf8.csv").write_bytes(b"sent0,sent1\n\xff,b\n")
    (folder / "empty.txt").write_bytes(b"")
    (folder / "empty.csv").write_bytes(b"")
    (folder / "wrong-columns.csv").write_text("premise,hypothesis\na,b\n")
    (folder / "not-csekit").mkdir()
    (folder / "not-csekit" / "notes.txt").write_text("someone's notes\n")
    for name, config in (("empty-config", ""), ("bad-json-config", "{model_type: bert}"),
                         ("no-model-type", '{"hidden_size": 32}'),
                         ("remote-code", '{"model_type": "my-own-model", "auto_map": {"AutoModel": "m.M"}}')):
        copy_folder(folder / "bert", folder / name)
        (folder / name / "config.json").write_text(config)
    copy_folder(folder / "bert", folder / "pickle-only")
    (folder / "pickle-only" / "model.safetensors").rename(folder / "pickle-only" / "pytorch_model.bin")
    BertModel(tiny_bert_config(vocab_size=100)).save_pretrained(folder / "big-vocab")
    tokenizer.save_pretrained(folder / "big-vocab")
    BertModel(tiny_bert_config(max_position_embeddings=8)).save_pretrained(folder / "short-positions")
    tokenizer.save_pretrained(folder / "short-positions")
    (folder / "bad.yaml").write_text("learning_rate: 1e-3\n  seed: [7\n")
    (folder / "list.yaml").write_text("- a\n- b\n")
    (folder / "a-folder").mkdir()
    (folder / "afile").write_text("a file\n")
    (folder / "trained" / "checkpoint-2").mkdir(parents=True)  # a csekit output folder with a broken checkpoint
    (folder / "trained" / "training_args.json").write_text("{}\n")
    for task in ("STS", "SICK"):  # SentEval's STS data with one STS16 test file missing
        shutil.copytree(data_dir / "senteval" / "downstream" / task, folder / "partial-data" / "senteval" / "downstream"
                        / task)
    next((folder / "partial-data" / "senteval" / "downstream" / "STS" / "STS16-en-test").glob("STS.input.*")).unlink()
    copy_folder(tiny, folder / "nan-config")
    config = json.loads((folder / "nan-config" / "config.json").read_text())
    (folder / "nan-config" / "config.json").write_text(json.dumps({**config, "temperature": float("nan")}))
    (folder / "nan.yaml").write_text("weight_decay: .nan\n")
    (folder / "list-number.yaml").write_text("learning_rate: [1.0e-5, 3.0e-5]\n")
    (folder / "map-number.yaml").write_text("max_steps: {value: 10}\n")
    (folder / "word-number.yaml").write_text("max_steps: ten\n")
    BertModel(tiny_bert_config(max_position_embeddings=512)).save_pretrained(folder / "no-tokenizer")
    copy_folder(folder / "bert", folder / "unk-tokenizer")  # a WordPiece vocabulary of special tokens and one word
    for name in list((folder / "unk-tokenizer").glob("tokenizer*")) + list((folder / "unk-tokenizer").glob("vocab*")):
        name.unlink()
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nzebra\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder / "unk-tokenizer")
    (folder / "vocab.txt").unlink()
    GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=30522)).save_pretrained(folder / "gpt2")
    tokenizer.save_pretrained(folder / "gpt2")
    T5Model(T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16, vocab_size=30522)).save_pretrained(
        folder / "t5")
    tokenizer.save_pretrained(folder / "t5")
    for name, record in (("resumable", {"method": "csekit-simcse", "per_device_train_batch_size": 16, "processes": 1,
                                        "gradient_accumulation_steps": 1}), ("foreign", None)):
        checkpoint = folder / name / "checkpoint-2"  # a complete checkpoint of a csekit run, or of something else
        checkpoint.mkdir(parents=True)
        (folder / name / "training_args.json").write_text("{}\n")
        (checkpoint / "model.safetensors").write_bytes((folder / "bert" / "model.safetensors").read_bytes())
        (checkpoint / "trainer_state.json").write_text("{}\n")
        if record:
            (checkpoint / "csekit_run.json").write_text(json.dumps(record))
    (folder / "triplets.csv").write_text("sent0,sent1,hard_neg\n" + "".join(f"a {i},b {i},c {i}\n" for i in range(70)))
    for name, header in (("ntuples", "hard_neg_1,hard_neg_2"), ("gap-ntuples", "hard_neg_1,hard_neg_3"),
                         ("mixed-ntuples", "hard_neg,hard_neg_1")):
        (folder / f"{name}.csv").write_text(f"sent0,sent1,{header}\n" + "".join(f"a {i},b {i},c {i},d {i}\n"
                                                                               for i in range(70)))
    copy_folder(tiny, folder / "list-results")
    (folder / "list-results" / "eval_results.json").write_text("[1, 2]\n")
    (folder / "not-results.json").write_text('{"accuracy": 0.9}\n')
    for name, edit in (("crafted-average", {"sts": {**scores, "avg": 90.0}}),
                       ("crafted-score", {"base_sts": {**scores, "STS12": float("nan")}}),
                       ("crafted-base", {"base_model": "/home/someone/bert"})):
        copy_folder(tiny, folder / name)
        record = json.loads((folder / name / "eval_results.json").read_text())
        (folder / name / "eval_results.json").write_text(json.dumps({**record, **edit}))
    for name, path in (("outside-module", "../tiny/1_Pooling"), ("pathless-module", None)):
        copy_folder(tiny, folder / name)
        entries = json.loads((folder / name / "modules.json").read_text())
        entries[1] = {key: value for key, value in entries[1].items() if key != "path"}
        entries[1].update({"path": path} if path else {})
        (folder / name / "modules.json").write_text(json.dumps(entries))
    (folder / "null-number.yaml").write_text("learning_rate: null\n")
    nan_model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(),
                                         pooler_type="avg"))
    with torch.no_grad():
        nan_model.encoder.embeddings.LayerNorm.weight[0] = float("nan")
    nan_model.tokenizer = tokenizer
    nan_model.save_pretrained(folder / "nan-weights")
    copy_folder(folder / "bert", folder / "damaged-tokenizer")
    (folder / "damaged-tokenizer" / "tokenizer.json").write_text("{}\n")
    copy_folder(folder / "bert", folder / "bert-as-decoder")
    decoder = json.loads((folder / "bert-as-decoder" / "config.json").read_text())
    (folder / "bert-as-decoder" / "config.json").write_text(json.dumps({**decoder, "is_decoder": True}))
    (folder / "locked").mkdir()  # a folder this (running) process holds
    save_other_families(folder, tokenizer)
    (folder / "locked" / ".csekit-lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    return folder


def save_other_families(folder: Path, tokenizer) -> None:
    """``sparse``, ``cross``, ``router`` and ``no-path``: folders sentence-transformers itself saves (``no-path``
    with its Pooling entry's path removed from ``modules.json``)."""
    from sentence_transformers import CrossEncoder, SentenceTransformer, SparseEncoder
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    from transformers import BertForMaskedLM

    BertForMaskedLM(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(folder / "masked-lm")
    tokenizer.save_pretrained(folder / "masked-lm")
    SparseEncoder(modules=[MLMTransformer(str(folder / "masked-lm")), SpladePooling("max")], device="cpu").save(
        str(folder / "sparse"))
    CrossEncoder(str(folder / "bert"), num_labels=1, device="cpu").save(str(folder / "cross"))
    router = Router.for_query_document(query_modules=[Transformer(str(folder / "bert")), Pooling(32, "mean")],
                                       document_modules=[Transformer(str(folder / "bert")), Pooling(32, "cls")])
    SentenceTransformer(modules=[router], device="cpu").save(str(folder / "router"))
    transformer = Transformer(str(folder / "bert"))
    SentenceTransformer(modules=[transformer, Pooling(32, "mean")], device="cpu").save(str(folder / "no-path"))
    entries = json.loads((folder / "no-path" / "modules.json").read_text())
    del entries[1]["path"]
    (folder / "no-path" / "modules.json").write_text(json.dumps(entries))


def copy_folder(source: Path, destination: Path) -> None:
    shutil.copytree(source, destination)


def snapshot(folder: Path) -> dict:
    """Every path under ``folder`` with, for a file, its inode, size and modification time: a write, a replacement
    (a new inode) or a new file changes it, and reading the stat alone keeps a row's check cheap."""
    def state(path: Path):
        status = path.lstat()
        return (status.st_ino, status.st_size, status.st_mtime_ns) if stat.S_ISREG(status.st_mode) else None

    return {str(path.relative_to(folder)): state(path) for path in sorted(folder.rglob("*"))}


PROGRESS_BAR = re.compile(r".*\| *\d+/\d+ \[.*\]|\s*")  # tqdm: "Loading weights: 100%|███| 37/37 [00:00<00:00, ..]"


def run_cli(argv: list) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exit:  # argparse
        return exit.code


@pytest.mark.parametrize("row", ROWS, ids=[row.command.removeprefix("csekit ") for row in ROWS])
def test_bad_input(row, workspace, monkeypatch, capsys):
    monkeypatch.chdir(workspace)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(workspace / "hf-cache"))
    before = snapshot(workspace)
    code = run_cli(argv_of(row.command))
    stderr = [line for line in capsys.readouterr().err.strip().splitlines() if not PROGRESS_BAR.fullmatch(line)]
    pattern = ".*".join(re.escape(part) for part in row.answer.split("…"))
    assert code == 2 and len(stderr) == 1 and re.fullmatch(pattern, stderr[0]), stderr
    assert snapshot(workspace) == before  # nothing written
