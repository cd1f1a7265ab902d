"""Check before work: what a command will need, verified before its first step.

Every command calls these before it trains, encodes or writes anything; each failure is a
[`DataError`][csekit.preflight.DataError] of one
line, ``<what>: <why>; <how to fix>``, and nothing has been written yet:

* the model: [`read_model_config`][csekit.preflight.read_model_config] (``config.json`` readable, with a ``model_type``
transformers knows without
  running the folder's own code, of a backbone family csekit supports:
  [`SUPPORTED_BACKBONES`][csekit.preflight.SUPPORTED_BACKBONES]),
  [`load_tokenizer`][csekit.preflight.load_tokenizer] (tokenizer files there, and a probe sentence that is not all
  unknown tokens) and
  [`check_model_inputs`][csekit.preflight.check_model_inputs] (the tokenizer's ids fit the embedding matrix, the
  longest input fits the position
  embeddings);
* settings: [`check_finite`][csekit.preflight.check_finite] (every float a flag, a YAML file or a config gives is a
finite number);
* the outputs: [`check_output_dir`][csekit.preflight.check_output_dir] and
[`check_output_file`][csekit.preflight.check_output_file] (not under a file, writable);
* a training run: [`check_training_arguments`][csekit.preflight.check_training_arguments] (the hyper-parameters mean a
run) and [`find_checkpoint`][csekit.preflight.find_checkpoint]
  (the resume target, or the newest *complete* checkpoint for ``last``).

The data a run reads (training file, evaluation sets) is read, and so checked, by the loaders the commands call first.
"""

import dataclasses
import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Optional

from .errors import DataError
from .modeling.decoder_tokenizer import PROBE_SENTENCE
from .modeling.decoder_tokenizer import prepare_decoder_tokenizer as prepare_tokenizer
from .modeling.errors import TokenizerUnfit
from .modeling.pooler_types import DECODER_BACKBONES

logger = logging.getLogger(__name__)

# encoders whose position ids start after the padding index (RoBERTa's create_position_ids_from_input_ids): an input
# of n tokens uses positions up to padding_idx + n
POSITIONS_AFTER_PADDING = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text", "mpnet")
# the encoder families csekit trains and evaluates (model_type: what the table of docs/training.md calls it). Each is
# covered by tests/test_backbones.py: padded and packed forward passes equal on a tiny random config. The decoder
# families (DECODER_BACKBONES) are covered by tests/test_decoders.py. Anything else is refused before any work:
# encoder-decoder models have no sentence encoder to pool, and an untested family is not guessed to work.
SUPPORTED_BACKBONES = {
    "bert": "BERT, MiniLM (all-MiniLM-L6-v2), SimCSE/sentence-transformers BERT models",
    "roberta": "RoBERTa", "xlm-roberta": "XLM-RoBERTa", "camembert": "CamemBERT", "distilbert": "DistilBERT",
    "electra": "ELECTRA", "albert": "ALBERT", "mpnet": "MPNet (all-mpnet-base-v2)", "deberta-v2": "DeBERTa-v2/v3",
    "modernbert": "ModernBERT",
}
# files that hold a tokenizer's vocabulary (without one, transformers builds a tokenizer of special tokens only)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "*.model", "spm.model")
CHECKPOINT_PREFIX = "checkpoint-"
CHECKPOINT_RECORD = "trainer_state.json"  # the Trainer's and CLSR's checkpoints both end with it
RUN_RECORD = "csekit_run.json"  # in every csekit checkpoint: the setup a resume must match (check_resume)


# ------------------------------------------------------------------------------------------------ the model
def read_model_config(folder) -> dict:
    """``folder/config.json`` as a dict; raises [`DataError`][csekit.preflight.DataError] when it is not JSON, has no
    ``model_type``, or
    names a model type only the folder's own code could build (csekit never runs a model folder's code)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; save or download the model again") from None
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: not valid JSON ({error.msg}, line {error.lineno} column {error.colno}); save or "
                        "download the model again") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not model_type or not isinstance(model_type, str):
        raise DataError(f"{path}: no model_type; save the model with transformers' save_pretrained (or add e.g. "
                        '"model_type": "bert")')
    if model_type not in CONFIG_MAPPING_NAMES and not model_type.startswith("csekit-"):
        raise DataError(f"{path}: model_type {model_type!r} needs the folder's own code (trust_remote_code), which "
                        "csekit never runs; use a model that transformers implements")
    check_backbone(path, config)
    return config


def is_csekit_model(folder) -> bool:
    """Whether ``folder`` holds a csekit model at its root (``config.json``'s ``model_type`` is a csekit one): csekit
    reads it with its own classes, whatever other library's files (sentence-transformers modules) sit beside it."""
    return (Path(folder) / "config.json").is_file() and read_model_config(folder)["model_type"].startswith("csekit-")


def backbone_table() -> str:
    """The supported backbone families, one ``model_type: name`` line each, the decoders marked (``--help-all``
    prints it)."""
    return "\n".join([f"  {model_type:<12} {name}" for model_type, name in SUPPORTED_BACKBONES.items()]
                     + [f"  {model_type:<12} {name} (decoder)" for model_type, name in DECODER_BACKBONES.items()])


def check_backbone(path, config: dict) -> None:
    """Raise [`DataError`][csekit.preflight.DataError] unless the backbone (a csekit config's ``encoder_config``) is a
    family of
    [`SUPPORTED_BACKBONES`][csekit.preflight.SUPPORTED_BACKBONES]; decoder-only and encoder-decoder models are named as
    such."""
    backbone = backbone_config(config)
    model_type = backbone.get("model_type") if isinstance(backbone, dict) else None
    if model_type in DECODER_BACKBONES and not backbone.get("is_encoder_decoder"):
        return
    if (model_type in SUPPORTED_BACKBONES and not backbone.get("is_decoder") and not backbone.get("add_cross_attention")
            and not backbone.get("is_encoder_decoder")) or str(model_type).startswith("csekit-"):
        return
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = ("an encoder-decoder model" if backbone.get("is_encoder_decoder") or backbone.get("add_cross_attention")
            else "configured as a decoder (is_decoder: causal attention)" if backbone.get("is_decoder")
            else "a decoder-only (causal) family csekit has not been tested on"
            if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else "a backbone family csekit has not been tested on")
    raise DataError(f"{path}: model_type {model_type!r} is {kind}; csekit trains and evaluates the encoder families "
                    f"{', '.join(SUPPORTED_BACKBONES)} and the decoder families {', '.join(DECODER_BACKBONES)} "
                    "(docs/training.md: Backbones)")

def load_tokenizer(name: str, folder):
    """The tokenizer saved in model ``folder`` (``name``: what the user typed), or a
    [`DataError`][csekit.preflight.DataError]."""
    from transformers import AutoTokenizer

    if not any(any(Path(folder).glob(pattern)) for pattern in TOKENIZER_FILES):
        raise DataError(f"{name}: no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {folder}; save the tokenizer "
                        "with the model (tokenizer.save_pretrained(folder))")
    from huggingface_hub.errors import StrictDataclassError

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except StrictDataclassError:  # the model's config.json, which the tokenizer reads too: said as such
        raise
    except Exception as error:  # the user's tokenizer files: unreadable, damaged JSON, a format tokenizers rejects
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise DataError(f"{name}: cannot load its tokenizer ({type(error).__name__}: {reason}); save the tokenizer "
                        "with the model") from None
    ids = tokenizer(PROBE_SENTENCE, add_special_tokens=False)["input_ids"]
    if not ids or all(token == tokenizer.unk_token_id for token in ids):
        raise DataError(f"{name}: its tokenizer turns the probe sentence {PROBE_SENTENCE!r} into unknown tokens only "
                        f"({len(tokenizer)} tokens in its vocabulary); save the model's own tokenizer with it")
    return tokenizer


def prepare_decoder_tokenizer(tokenizer, backbone_type: Optional[str], pooler_type: Optional[str], name: str):
    """The model's own preparation of a decoder's tokenizer
    ([`csekit.modeling.decoder_tokenizer.prepare_decoder_tokenizer`][csekit.modeling.decoder_tokenizer.prepare_decoder_tokenizer]:
    its end-of-sequence token as pad, and appended for ``last_token``), where what it cannot prepare is a
    [`DataError`][csekit.preflight.DataError]."""
    try:
        return prepare_tokenizer(tokenizer, backbone_type, pooler_type, name)
    except TokenizerUnfit as error:
        raise DataError(str(error)) from None


def check_masked_lm(name: str, folder, flag: str, tokenizer, encoder_folder) -> None:
    """A method's auxiliary masked language model (DiffCSE's generator) checked for what the method uses, before any
    work: a transformers masked-LM family (not a sentence-encoder folder), every weight of its masked-LM head in the
    folder (transformers would initialise a missing one at random and only its load report says so), and the
    vocabulary of the encoder at ``encoder_folder`` (its size) and of its ``tokenizer`` (token for token, the same
    mask token). Each mismatch is one
    [`DataError`][csekit.preflight.DataError]."""
    from transformers import AutoConfig, AutoModelForMaskedLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    config = read_model_config(folder)
    model_type = config["model_type"]
    if model_type.startswith("csekit-") or Path(folder, "modules.json").is_file():
        raise DataError(f"{flag} {name}: a sentence-encoder folder, not a masked language model; give a "
                        "*ForMaskedLM model (e.g. distilbert-base-uncased) that shares the encoder's tokenizer")
    if model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise DataError(f"{flag} {name}: model_type {model_type!r} has no masked-LM class in transformers")
    from transformers.utils import logging as transformers_logging

    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()  # its load report of a missing head is this check's answer
    transformers_logging.disable_progress_bar()
    try:
        _, info = AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True,
                                                       config=AutoConfig.from_pretrained(folder))
    except (OSError, ValueError) as error:
        raise DataError(f"{flag} {name}: cannot load it as a masked language model "
                        f"({(str(error).splitlines() or [type(error).__name__])[0]})") from None
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    missing = sorted(info["missing_keys"])
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise DataError(f"{flag} {name}: its folder has no weights for {shown}, so its masked-LM predictions would "
                        "come from random weights; give a model trained as a masked LM")
    sizes = config.get("vocab_size"), backbone_config(read_model_config(encoder_folder)).get("vocab_size")
    if sizes[0] != sizes[1]:
        raise DataError(f"{flag} {name}: its vocabulary differs from the encoder's ({sizes[0]} tokens, the encoder "
                        f"{sizes[1]}); it must share the encoder's tokenizer")
    theirs = load_tokenizer(f"{flag} {name}", folder)
    differing = len(set(theirs.get_vocab().items()) ^ set(tokenizer.get_vocab().items()))
    if differing or theirs.mask_token_id != tokenizer.mask_token_id:
        raise DataError(f"{flag} {name}: its vocabulary differs from the encoder's tokenizer ({differing} token-id "
                        f"pairs differ; mask token id {theirs.mask_token_id} vs {tokenizer.mask_token_id}); it must "
                        "read the encoder's token ids")


AUXILIARY_CHECKS = {"masked-lm": check_masked_lm}  # a config's model_path_fields name one kind per further model


def backbone_config(config: dict) -> dict:
    """The encoder's settings: a csekit config nests them under ``encoder_config``."""
    return config.get("encoder_config") or config


def check_model_inputs(name: str, config: dict, tokenizer, max_length: Optional[int], flag: str) -> None:
    """Raise [`DataError`][csekit.preflight.DataError] when ``tokenizer`` produces ids the embedding matrix lacks, or
    inputs of
    ``max_length`` tokens need more position embeddings than the model has (``flag`` is the option that sets the
    length). Without ``max_length``, a tokenizer whose own maximum exceeds the positions is capped to them."""
    backbone = backbone_config(config)
    rows = backbone.get("vocab_size")
    if rows and len(tokenizer) > rows:
        raise DataError(f"{name}: its tokenizer has {len(tokenizer)} tokens but the model's embedding matrix has "
                        f"{rows} rows; use the tokenizer saved with the model")
    positions = backbone.get("max_position_embeddings")
    if not positions:
        return
    offset = (backbone.get("pad_token_id") or 0) + 1 if backbone.get("model_type") in POSITIONS_AFTER_PADDING else 0
    if max_length is None:
        if tokenizer.model_max_length > positions - offset:
            logger.info("%s: truncating inputs at %d tokens, the model's position embeddings (its tokenizer says %s)",
                        name, positions - offset, tokenizer.model_max_length)
            tokenizer.model_max_length = positions - offset
        return
    length = max_length
    special = tokenizer.num_special_tokens_to_add()
    if length <= special:  # every sentence would be the same special tokens: one input for all of them
        raise DataError(f"{flag} {length}: leaves no room for a word after the tokenizer's {special} special tokens; "
                        f"give {flag} {special + 1} or more")
    if length + offset > positions:
        raise DataError(f"{name}: inputs of {length} tokens need {length + offset} position embeddings, the model has "
                        f"{positions}; pass {flag} {positions - offset} or less")


def check_prompt_room(prompt: str, tokenizer, max_length: Optional[int], flag: str) -> None:
    """A ``prompt`` leaves room for a word of the sentence within ``max_length`` tokens (``flag`` sets the length):
    otherwise truncation would cut every sentence away and each would encode as the prompt alone."""
    if not prompt or not max_length:
        return
    tokens = len(tokenizer(prompt + PROBE_SENTENCE.split()[0])["input_ids"]) - 1  # the prompt and special tokens
    if tokens >= max_length:
        raise DataError(f"prompt {prompt!r}: {tokens} tokens with the special ones, which leaves no room for the "
                        f"sentence at {flag} {max_length}; shorten the prompt or raise {flag}")


def check_method_backbone(method, backbone_type: Optional[str], name: str) -> None:
    """Raise [`DataError`][csekit.preflight.DataError] when ``method`` (a registry entry) is given a decoder backbone
    it cannot train (its ``not_on_decoders`` reason)."""
    if backbone_type in DECODER_BACKBONES and method is not None and method.not_on_decoders:
        raise DataError(f"{name}: a decoder ({backbone_type!r}), which {method.title} cannot train: "
                        f"{method.not_on_decoders}")


def check_trainer_model(model, trainer_class: type) -> None:
    """Raise [`DataError`][csekit.preflight.DataError] unless ``model`` is the class ``trainer_class``'s method trains
    (the registry's pairing, [`csekit.methods`][csekit.methods]): another method's model, a method's published
    encoder where training needs its training-only parts, or a sentence-transformers object would train the wrong
    loss or fail inside a step. A trainer or model the registry does not know is left to its author."""
    from .methods import method_of_model, method_of_trainer

    if model is None:
        return
    kind, method = type(model), method_of_trainer(trainer_class)
    if method is None:
        return
    build = f"build it with {method.training_model_class.__name__}.from_encoder(<a backbone folder or Hub id>)"
    if kind.__module__.split(".")[0] == "sentence_transformers":
        raise DataError(f"model: a sentence-transformers {kind.__name__}; {trainer_class.__name__} trains "
                        f"{method.title}'s own model: {build} (a sentence-transformers folder is a backbone too)")
    found = method_of_model(kind)
    if found is None:
        raise DataError(f"model: a {kind.__name__}, but {trainer_class.__name__} trains {method.title}'s "
                        f"{method.training_model_class.__name__}; {build}")
    owner, trained = found
    if owner is not method or not trained:
        what = (f"{owner.title}'s published encoder; training needs {method.training_model_class.__name__}"
                if owner is method else f"{owner.title}'s model, not {method.title}'s")
        raise DataError(f"model: a {kind.__name__} ({what}); {trainer_class.__name__} trains "
                        f"{method.training_model_class.__name__}: {build}")
    backbone = getattr(getattr(getattr(model, "config", None), "encoder_config", None), "model_type", None)
    check_method_backbone(method, backbone, "model")


# ------------------------------------------------------------------------------------------------ settings
def check_finite(flag: str, value) -> None:
    """Raise [`DataError`][csekit.preflight.DataError] when ``value`` (a setting, or a list of them) holds a float that
    is NaN or
    infinite: no learning rate, temperature or loss weight means anything then."""
    for item in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(item, float) and not math.isfinite(item):
            raise DataError(f"{flag} {item}: must be a finite number")


def check_finite_groups(groups) -> None:
    """[`check_finite`][csekit.preflight.check_finite] on every field of the parsed argument dataclasses ``groups``
    (``--name`` in the line)."""
    for group in groups:
        for item in dataclasses.fields(group):
            check_finite(f"--{item.name}", getattr(group, item.name, None))


# ------------------------------------------------------------------------------------------------ outputs
def check_writable(path, flag: str, folder=None) -> None:
    """``path`` (a folder to create or fill, or a file in ``folder``) lies under folders only, and the nearest
    existing one takes a file."""
    path = Path(path)
    existing = Path(folder) if folder is not None else path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise DataError(f"{flag} {path}: {existing} is a file, not a folder; choose another path")
    try:
        with tempfile.TemporaryFile(dir=existing):  # what the OS says, not the mode bits (root, ACLs, read-only mounts)
            pass
    except OSError as error:
        raise DataError(f"{flag} {path}: cannot write in {existing} ({error.strerror}); choose a folder you can "
                        "write to") from None


def check_output_dir(path, flag: str, inputs=()) -> Path:
    """``path`` as a folder the command will write into: not a file, not under one, writable, not one of the
    ``inputs`` (nor inside one, nor holding one)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DataError(f"{flag} {path}: is a file, not a folder")
    check_not_an_input(path, flag, inputs)
    check_writable(path, flag)
    return path


def check_output_file(path, flag: str = "--output", inputs=()) -> Path:
    """``path`` as a file to write at the end: not a folder, its folder writable, and not a file of one of the
    ``inputs`` (model folders the command reads) other than the results and card csekit writes there."""
    written = str(path)
    path = Path(path)
    if path.is_dir() or written.endswith(("/", os.sep)):  # "dir/" names a folder, even one not made yet
        raise DataError(f"{flag} {written}: is a folder; give a file name, e.g. {path / 'results.json'}")
    check_not_an_input(path, flag, inputs, writes_file=True)
    check_writable(path, flag, path.parent)
    return path


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` as a Hub model repository id (``namespace/name``, huggingface_hub's own validation), checked
    before anything is written or uploaded."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise DataError(f"repo id must look like 'namespace/name', got {repo_id!r}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        reason = str(error).splitlines()[0]
        raise DataError(f"repo id {repo_id!r} is not a valid Hub repository id ({reason})") from None
    return repo_id


def check_not_an_input(output, flag: str, inputs, writes_file: bool = False) -> None:
    """Refuse an output that is (or would replace) what the command reads: a folder that is an input model folder,
    lies inside one or holds one, or (``writes_file``) an existing file of one (its ``eval_results.json`` and
    ``README.md`` are csekit's own outputs there)."""
    target = Path(output).resolve()
    for source in inputs:
        if source is None or not Path(source).is_dir():
            continue
        folder = Path(source).resolve()
        if writes_file:
            clash = folder in target.parents and target.exists() and target.name not in ("eval_results.json",
                                                                                         "README.md")
        else:
            clash = target == folder or folder in target.parents or target in folder.parents
        if clash:
            raise DataError(f"{flag} {output}: would overwrite the input {source} (the output is the input, lies in "
                            "it or holds it); choose another path")


# ------------------------------------------------------------------------------------------------ a training run
def check_training_arguments(args) -> None:
    """Hyper-parameters that cannot mean a run (``TrainingArguments`` or CLSR's): no step to train, no update to
    apply, a learning rate that is not positive."""
    epochs, max_steps = getattr(args, "num_train_epochs", 1), getattr(args, "max_steps", -1) or -1
    if max_steps <= 0 and epochs <= 0:
        raise DataError(f"--num_train_epochs {epochs:g}: no training step would run; give --num_train_epochs > 0 or "
                        "--max_steps > 0")
    accumulation = getattr(args, "gradient_accumulation_steps", 1)
    if accumulation < 1:
        raise DataError(f"--gradient_accumulation_steps {accumulation}: must be 1 or more (1 = no accumulation)")
    if args.learning_rate <= 0:  # 0: every update is zero, and the saved "trained" model is the starting one
        raise DataError(f"--learning_rate {args.learning_rate:g}: must be > 0 (at 0 no update changes the model)")
    for flag in ("seed", "data_seed"):  # numpy's generators take 0 .. 2**32 - 1 (set_seed seeds them all)
        seed = getattr(args, flag, None)
        if seed is not None and not 0 <= seed < 2**32:
            raise DataError(f"--{flag} {seed}: must be between 0 and {2**32 - 1}")
    workers = getattr(args, "dataloader_num_workers", 0)
    if workers < 0:
        raise DataError(f"--dataloader_num_workers {workers}: must be 0 or more (0 = load in the main process)")
    for strategy, flag in (("eval_strategy", "eval_steps"), ("save_strategy", "save_steps"),
                           ("logging_strategy", "logging_steps")):
        steps = getattr(args, flag, None)
        if str(getattr(args, strategy, "steps")).split(".")[-1].lower() == "steps" and steps is not None and steps <= 0:
            raise DataError(f"--{flag} {steps:g}: must be > 0 (a step count, or a fraction of the run below 1)")
    if getattr(args, "mini_batch_size", None) and getattr(args, "mini_batch_tokens", None):
        raise DataError(f"--mini_batch_size {args.mini_batch_size} and --mini_batch_tokens {args.mini_batch_tokens}: "
                        "gradient caching cuts chunks by a count of examples or by a token budget; give one")
    check_report_to(getattr(args, "report_to", None))


def check_report_to(report_to) -> None:
    """``--report_to``: 'none', 'all', or integrations transformers knows (their packages are checked when used)."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    names = report_to if isinstance(report_to, (list, tuple)) else [report_to] if report_to else []
    unknown = [name for name in names if name not in ("none", "all", *INTEGRATION_TO_CALLBACK)]
    if unknown:
        raise DataError(f"--report_to {', '.join(map(str, unknown))}: unknown; use none or one of "
                        f"{', '.join(INTEGRATION_TO_CALLBACK)}")


def weight_files(folder) -> list:
    """The model's safetensors files: those at the top level, and those the index names (a csekit folder keeps the
    backbone's in ``encoder/``, where sentence-transformers reads it too)."""
    folder = Path(folder)
    files = set(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            files.update(folder / name for name in json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise DataError(f"{index}: not a safetensors index (no weight_map); save the model again") from None
    return sorted(files)


def checkpoint_problem(folder: Path, record: Optional[str] = CHECKPOINT_RECORD) -> Optional[str]:
    """Why ``folder`` is not a complete checkpoint (``None`` when it is): its ``record``, written last, parses and
    every safetensors file in it has a readable header (``record=None``: a saved model, weights only)."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    try:
        if record:
            json.loads((folder / record).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {record}"
    except (OSError, ValueError) as error:
        return f"unreadable {record} ({type(error).__name__})"
    try:
        weights = weight_files(folder)
    except DataError:
        return "unreadable model.safetensors.index.json"
    if not weights:
        return "no *.safetensors"
    for path in weights:
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError):
            return f"truncated {path.relative_to(folder)}"
    return None


def find_checkpoint(output_dir, which: Optional[str]) -> Optional[str]:
    """The folder ``--resume_from_checkpoint which`` names: ``None`` for no resume, a checkpoint folder as given, or
    for ``last`` the newest complete ``checkpoint-N`` of ``output_dir`` (incomplete ones are skipped, with a log
    line: a kill inside a save on storage without atomic renames, or a partial copy)."""
    if not which:
        return None
    if which != "last":
        folder = Path(which)
        if not folder.is_dir():
            raise DataError(f"--resume_from_checkpoint {which}: no such folder; give a checkpoint-N folder or 'last'")
        problem = checkpoint_problem(folder)
        if problem:
            raise DataError(f"--resume_from_checkpoint {which}: incomplete checkpoint ({problem}); give another one "
                            "or 'last'")
        return str(folder)
    found = sorted((int(path.name[len(CHECKPOINT_PREFIX):]), path)
                   for path in Path(output_dir).glob(f"{CHECKPOINT_PREFIX}*")
                   if path.is_dir() and path.name[len(CHECKPOINT_PREFIX):].isdigit())
    for _, folder in reversed(found):
        problem = checkpoint_problem(folder)
        if problem is None:
            return str(folder)
        logger.warning("skipping %s: incomplete checkpoint (%s)", folder, problem)
    raise DataError(f"--resume_from_checkpoint last: no complete checkpoint in {output_dir}; start without "
                    "--resume_from_checkpoint")


# the run record's key for the training examples' content hash (trainers/data.py data_fingerprint), and its name in
# a resume's message
TRAIN_DATA = "train_data"
TRAIN_DATA_NAME = "the training data (--train_file's contents)"
# settings the restored optimizer and scheduler keep at the checkpoint's values (their state holds them)
RESTORED_ON_RESUME = ("learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "optim_args",
                      "lars_momentum", "lars_trust_coefficient")


def resume_differences(record: dict, expected: dict) -> list:
    """``["--learning_rate 3e-05 -> 0.001", ...]``: each setting of ``expected`` the checkpoint's ``record`` holds
    with another value (a key one csekit version records and the other does not is not compared)."""
    differences = []
    for key, value in expected.items():
        if key in record and record[key] != value:
            flag = key if key in ("method", "processes") else TRAIN_DATA_NAME if key == TRAIN_DATA else f"--{key}"
            effect = " (cannot take effect: the restored optimizer keeps the checkpoint's)" if (
                key in RESTORED_ON_RESUME) else ""
            differences.append(f"{flag} {record[key]} -> {value}{effect}")
    return differences


def check_resume(checkpoint, expected: dict, accept_changes: bool) -> list:
    """Raise [`DataError`][csekit.preflight.DataError] when ``checkpoint`` is not a csekit checkpoint (no
    [`RUN_RECORD`][csekit.preflight.RUN_RECORD]) or was made
    with another setup than ``expected`` (every setting that changes the trained model:
    [`csekit.trainers.arguments.setup_record`][csekit.trainers.arguments.setup_record]), naming each flag with both
    values, unless ``accept_changes``
    (``--resume_accept_changes``). Returns the accepted differences, which the run then records."""
    path = Path(checkpoint) / RUN_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"--resume_from_checkpoint {checkpoint}: not a csekit checkpoint (no {RUN_RECORD}); give a "
                        "checkpoint-N folder that a csekit run of this method wrote, or start without it") from None
    except (OSError, ValueError) as error:
        raise DataError(f"--resume_from_checkpoint {checkpoint}: unreadable {RUN_RECORD} ({type(error).__name__}); "
                        "give another checkpoint") from None
    record = record if isinstance(record, dict) else {}
    if "method" not in record:
        raise DataError(f"--resume_from_checkpoint {checkpoint}: {RUN_RECORD} names no method; give a checkpoint "
                        "that a csekit run wrote")
    differences = resume_differences(record, expected)
    if differences and not accept_changes:
        raise DataError(f"--resume_from_checkpoint {checkpoint}: the checkpoint was made with another setup "
                        f"({'; '.join(differences)}); resume with its settings, or pass --resume_accept_changes true "
                        "to continue anyway (the run records it)")
    if differences:
        logger.warning("resuming %s with another setup (%s): the result is not the uninterrupted run's", checkpoint,
                       "; ".join(differences))
    return differences


__all__ = [
    "AUXILIARY_CHECKS", "CHECKPOINT_PREFIX", "CHECKPOINT_RECORD", "DECODER_BACKBONES", "PROBE_SENTENCE", "RUN_RECORD",
    "SUPPORTED_BACKBONES", "TRAIN_DATA", "backbone_config", "backbone_table", "check_backbone", "check_finite",
    "check_finite_groups", "check_masked_lm", "check_method_backbone", "check_model_inputs", "check_not_an_input",
    "check_output_dir", "check_output_file", "check_repo_id", "check_report_to", "check_resume",
    "check_trainer_model", "check_training_arguments", "check_writable", "checkpoint_problem", "find_checkpoint",
    "is_csekit_model", "load_tokenizer", "read_model_config",
]
