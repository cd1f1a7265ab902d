"""The sentence-transformers files of a csekit model folder, so one folder loads with both libraries:

    AutoModel.from_pretrained(folder)        # csekit registered (import csekit) or trust_remote_code=True
    SentenceTransformer(folder)              # sentence-transformers alone: no csekit, no remote code

Layout (written by ``save_pretrained`` when the model knows its tokenizer)::

    config.json, tokenizer files             the csekit model, as transformers saves it
    model.safetensors.index.json             the csekit weights: encoder.* -> encoder/model.safetensors, the
                                             inference head -> N_Dense/model.safetensors, the rest -> here:
    model-head.safetensors                   weights no sentence-transformers module holds (a training-only MLP)
    encoder/                                 sentence-transformers' Transformer module: the backbone's own
        config.json, tokenizer files         config and tokenizer, the same weight file (read with the key
        model.safetensors                    mapping encoder.X -> X), sentence_bert_config.json
    1_Pooling/config.json                    cls, mean, lasttoken or weightedmean over the last layer
    2_Dense/, 3_Dense/                       the inference head as Linear + activation modules, when it has one
    modules.json, config_sentence_transformers.json

Every weight is stored once: the index of the csekit model points into ``encoder/`` and the Dense modules, so neither
the folder, the Hub repository nor the Hugging Face cache holds the backbone or the head twice. sentence-transformers
reads a Dense file's ``linear.weight``/``linear.bias`` and nothing else, so those are its keys;
`weights_with_dense_head` gives transformers' loader the csekit names (``mlp.dense.weight``...), derived from
the model's `inference_head_layers` as the writer derives the folders. Training checkpoints keep the head in
``model-head.safetensors`` too (``head_in_dense=False``): the Trainer resumes with ``load_sharded_checkpoint``,
which reads keys by name.

A model whose inference is not backbone -> last-layer [CLS] or mean -> Linear/activation chain (the multi-layer
poolers ``avg_first_last``, ``avg_top2``, ``layers``; WhitenedCSE's whitened representations) gets no
sentence-transformers files; `sentence_transformers_layout_problem` says why, the model card repeats it, and
``csekit export-st --layout remote-code`` covers it.
"""

import json
import os
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .errors import LayoutDisagreement

ENCODER_FOLDER = "encoder"
HEAD_WEIGHTS = "model-head.safetensors"
INDEX_FILE = "model.safetensors.index.json"
POOLING_MODES = {"cls": "cls", "cls_before_pooler": "cls", "avg": "mean", "last_token": "lasttoken",
                 "weighted_avg": "weightedmean"}
# the name of a model's ``prompt`` among the folder's sentence-transformers prompts, its default one
PROMPT_NAME = "default"
# files of the layout at the folder's top level (a folder committed over an older model replaces or removes them)
TOP_LEVEL_FILES = ("modules.json", "config_sentence_transformers.json")
# the oldest sentence-transformers that reads this layout (setup.cfg's lower bound), named as the writing version
# when sentence-transformers is not installed (a newer one there would make older readers warn)
LAYOUT_SENTENCE_TRANSFORMERS = "5.4.0"
# the one module of ``csekit export-st --layout remote-code`` (csekit/publishing/csekit_st.py), which loads the folder's
# csekit model itself: that pipeline encodes as the model does by construction
RUNS_THE_MODEL = "CSEKitEncoder"


def layout_versions() -> dict:
    """``config_sentence_transformers.json``'s ``__version__``, as sentence-transformers writes it: the versions of
    sentence-transformers (installed, else the oldest that reads the layout), transformers and torch."""
    from importlib.metadata import PackageNotFoundError, version

    import transformers

    try:
        writer = version("sentence-transformers")
    except PackageNotFoundError:
        writer = LAYOUT_SENTENCE_TRANSFORMERS
    return {"sentence_transformers": writer, "transformers": transformers.__version__, "pytorch": torch.__version__}
ST_MODULES = {"Transformer": "sentence_transformers.base.modules.Transformer",
              "Pooling": "sentence_transformers.sentence_transformer.modules.Pooling",
              "Dense": "sentence_transformers.base.modules.Dense",
              "Normalize": "sentence_transformers.sentence_transformer.modules.Normalize"}  # there from 5.4 on
ACTIVATIONS = {nn.Tanh: "torch.nn.modules.activation.Tanh", nn.ReLU: "torch.nn.modules.activation.ReLU",
               nn.Identity: "torch.nn.modules.linear.Identity"}


def inherited_settings(folder) -> dict:
    """The inference settings a sentence-transformers folder records, for a model trained from it: ``max_seq_length``
    and ``do_lower_case`` (``sentence_bert_config.json``), ``normalize`` (a Normalize module), and
    ``similarity_fn_name``, ``prompts``, ``default_prompt_name`` (``config_sentence_transformers.json``). ``{}`` for
    a folder without ``modules.json`` (a plain backbone) or a path that is not a local folder."""
    folder = Path(folder)
    if not (folder / "modules.json").is_file():
        return {}
    modules = json.loads((folder / "modules.json").read_text())
    settings = {"normalize": any(module.get("type", "").endswith("Normalize") for module in modules)}
    transformer = next((module for module in modules if module.get("type", "").endswith("Transformer")), {})
    backbone = folder / transformer.get("path", "") / "sentence_bert_config.json"
    if backbone.is_file():
        recorded = json.loads(backbone.read_text())
        settings.update({key: recorded[key] for key in ("max_seq_length", "do_lower_case") if key in recorded})
    top = folder / "config_sentence_transformers.json"
    if top.is_file():
        recorded = json.loads(top.read_text())
        settings.update({key: recorded[key] for key in ("similarity_fn_name", "prompts", "default_prompt_name")
                         if recorded.get(key) is not None})
    return settings


def sentence_transformers_layout_problem(model) -> Optional[str]:
    """Why ``model``'s inference cannot be written as sentence-transformers' Transformer + Pooling + Dense modules,
    or ``None`` when it can."""
    if model.config.pooler_type not in POOLING_MODES:
        return (f"pooler {model.config.pooler_type!r} reads several layers, which sentence-transformers' Pooling "
                "module cannot")
    if model.inference_head_layers() is None:
        return f"{type(model).__name__}'s inference head is not a chain of Linear + activation layers"
    if model.config.bidirectional:
        return ("its decoder attends bidirectionally, and sentence-transformers' Transformer module would load it "
                "causal")
    return None


def save_weights(tensors: dict, path: Path) -> None:
    """safetensors' ``save_file`` with the mode ``open()`` gives under the umask (it writes owner-only files)."""
    save_file(tensors, path, metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def dense_head_keys(model) -> dict:
    """``{csekit key: (Dense folder, sentence-transformers key)}`` for the Linear layers of the model's inference
    head: ``mlp.dense.weight -> ("2_Dense", "linear.weight")``. ``{}`` when the head is the identity or no chain."""
    names = {id(module): name for name, module in model.named_modules()}
    keys = {}
    for index, (linear, _) in enumerate(model.inference_head_layers() or [], start=2):
        for part in ("weight", "bias"):
            if getattr(linear, part) is not None:
                keys[f"{names[id(linear)]}.{part}"] = (f"{index}_Dense", f"linear.{part}")
    return keys


def weights_with_dense_head(model, checkpoint_files) -> Optional[dict]:
    """The weights of ``checkpoint_files`` (resolved paths from transformers' loader) under the csekit names, the
    Dense modules' ``linear.*`` renamed to the head's keys (`dense_head_keys`); ``None`` when no file is a
    Dense module's (a single file, a checkpoint, a folder saved before the head moved), to load as transformers
    does. Tensors are read lazily (safetensors slices), as transformers itself reads them."""
    from safetensors import safe_open

    dense = {folder_and_key: key for key, folder_and_key in dense_head_keys(model).items()}
    files = [Path(path) for path in checkpoint_files]
    if not any(path.parent.name.endswith("_Dense") for path in files):
        return None
    weights = {}
    for path in files:
        opened = safe_open(str(path), framework="pt")
        for key in opened.keys():
            if path.parent.name.endswith("_Dense"):
                if (path.parent.name, key) not in dense:
                    expected = sorted(st_key for folder, st_key in dense if folder == path.parent.name)
                    raise LayoutDisagreement(
                        f"{path}: {key} is not a weight of {type(model).__name__}'s inference head (expected "
                        f"{', '.join(expected) or 'no Dense module here'}); the folder and its config disagree")
                weights[dense[path.parent.name, key]] = opened.get_slice(key)
            else:
                weights[key] = opened.get_slice(key)
    return weights


def _split_weights(folder: Path, prefix: str, dense: dict) -> dict:
    """Rewrite ``model.safetensors`` as ``encoder/model.safetensors`` (``prefix.*``) + the Dense modules (the keys
    of ``dense``, see `dense_head_keys`) + ``model-head.safetensors`` (the rest) + the index that transformers
    reads; a sharded save (over ``max_shard_size``) stays as it is. Returns the weights read."""
    weights = load_file(folder / "model.safetensors")
    encoder = {key: value for key, value in weights.items() if key.startswith(prefix + ".")}
    head = {key: value for key, value in weights.items() if not key.startswith(prefix + ".") and key not in dense}
    (folder / ENCODER_FOLDER).mkdir(exist_ok=True)
    save_weights(encoder, folder / ENCODER_FOLDER / "model.safetensors")
    weight_map = dict.fromkeys(encoder, f"{ENCODER_FOLDER}/model.safetensors")
    weight_map.update({key: f"{dense[key][0]}/model.safetensors" for key in dense})
    if head:
        save_weights(head, folder / HEAD_WEIGHTS)
        weight_map.update(dict.fromkeys(head, HEAD_WEIGHTS))
    elif (folder / HEAD_WEIGHTS).exists():  # (written into a folder that held an older save)
        os.remove(folder / HEAD_WEIGHTS)
    size = sum(value.numel() * value.element_size() for value in weights.values())
    write_json(folder / INDEX_FILE, {"metadata": {"total_size": size}, "weight_map": dict(sorted(weight_map.items()))})
    os.remove(folder / "model.safetensors")
    return weights


def _accepts(model_class, argument: str) -> bool:
    import inspect

    return argument in inspect.signature(model_class.__init__).parameters


def layout_json(model, tokenizer) -> dict:
    """``{path: content}`` of every JSON file of ``model``'s sentence-transformers layout but the Transformer
    module's own config and tokenizer (what ``model``'s config and ``tokenizer`` decide: modules, pooling, Dense
    shapes and activations, truncation length, prompts), ``{}`` when the model has no layout
    (`sentence_transformers_layout_problem`). The one source of both the writer and the check of a folder
    (`layout_disagreement`)."""
    if sentence_transformers_layout_problem(model):
        return {}
    model_kwargs = {"key_mapping": {rf"^{model.base_model_prefix}\.": ""}}  # the csekit keys, read by the bare class
    if _accepts(type(model.encoder), "add_pooling_layer") and getattr(model.encoder, "pooler", None) is None:
        model_kwargs["add_pooling_layer"] = False  # csekit drops BERT's tanh pooler, so there is none to load
    settings = model.config.sentence_transformers_settings or {}
    max_length = model.config.max_length or (tokenizer.model_max_length if tokenizer.model_max_length < 10**6
                                             else None)
    files = {f"{ENCODER_FOLDER}/sentence_bert_config.json": {
        "max_seq_length": max_length, "do_lower_case": settings.get("do_lower_case", False),
        "model_kwargs": model_kwargs}}
    modules = [{"idx": 0, "name": "0", "path": ENCODER_FOLDER, "type": ST_MODULES["Transformer"]},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_MODULES["Pooling"]}]
    files["1_Pooling/config.json"] = {"embedding_dimension": model.config.hidden_size,
                                      "pooling_mode": POOLING_MODES[model.config.pooler_type], "include_prompt": True}
    for index, (linear, activation) in enumerate(model.inference_head_layers(), start=2):
        files[f"{index}_Dense/config.json"] = {
            "in_features": linear.in_features, "out_features": linear.out_features, "bias": linear.bias is not None,
            "activation_function": ACTIVATIONS[type(activation)]}
        modules.append({"idx": index, "name": str(index), "path": f"{index}_Dense", "type": ST_MODULES["Dense"]})
    if settings.get("normalize"):  # the base model's Normalize module (it has no files)
        index = len(modules)
        modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize",
                        "type": ST_MODULES["Normalize"]})
    files["modules.json"] = modules
    # the model's own prompt, which encode and training apply, is the default one
    default = PROMPT_NAME if model.config.prompt is not None else settings.get("default_prompt_name")
    files["config_sentence_transformers.json"] = {
        "__version__": layout_versions(), "model_type": "SentenceTransformer", "prompts": model.prompts(),
        "default_prompt_name": default,
        "similarity_fn_name": settings.get("similarity_fn_name", "cosine")}
    return files


def write_sentence_transformers_layout(model, folder, tokenizer, head_in_dense: bool = True) -> bool:
    """Add the sentence-transformers files (`layout_json`, the encoder's config and tokenizer, the Dense modules'
    weights) to ``folder``, which ``model.save_pretrained`` has just written.

    ``head_in_dense``: the inference head is stored in the Dense modules only (a published folder); ``False`` keeps
    it in ``model-head.safetensors`` as well (a training checkpoint, see the module docstring).
    Returns whether the files were written (see `sentence_transformers_layout_problem`).
    """
    folder = Path(folder)
    files = layout_json(model, tokenizer)
    if not files or not (folder / "model.safetensors").is_file():
        return False
    head_keys = dense_head_keys(model)
    weights = _split_weights(folder, model.base_model_prefix, head_keys if head_in_dense else {})
    model.encoder.config.to_json_file(folder / ENCODER_FOLDER / "config.json")
    tokenizer.save_pretrained(folder / ENCODER_FOLDER)
    for path, content in files.items():
        write_json(folder / path, content)
    for index in range(2, 2 + len(model.inference_head_layers())):
        path = f"{index}_Dense"
        state = {st_key: weights[key].to(torch.float32).contiguous()  # the values transformers saved
                 for key, (dense_folder, st_key) in head_keys.items() if dense_folder == path}
        save_weights(state, folder / path / "model.safetensors")
    return True


def _first_difference(found, expected, where: str) -> Optional[str]:
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected), key=str):
            if key != "__version__":
                difference = _first_difference(found.get(key), expected.get(key), f"{where} {key}")
                if difference:
                    return difference
        return None
    if found != expected:
        return f"{where} is {_shown(found)} where the config gives {_shown(expected)}"
    return None


def _shown(value) -> str:
    """A value for a one-line message: a module list as its modules' kinds and paths."""
    if isinstance(value, list) and all(isinstance(entry, dict) for entry in value):
        return " > ".join(f"{str(entry.get('type', '?')).rsplit('.', 1)[-1]}({entry.get('path')})" for entry in value)
    return json.dumps(value)


def layout_disagreement(model, tokenizer, folder) -> Optional[str]:
    """Where ``folder``'s sentence-transformers files say another model than ``model`` (loaded from it) with
    ``tokenizer``: a file, a setting and both values in one line, ``None`` when they agree (or ``folder`` has no
    ``modules.json``). ``SentenceTransformer(folder)`` reads those files, csekit the config: where they disagree, the
    two give other vectors of one folder."""
    folder = Path(folder)
    if not (folder / "modules.json").is_file():
        return None
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "modules.json is unreadable"
    only = modules[0] if isinstance(modules, list) and len(modules) == 1 and isinstance(modules[0], dict) else {}
    if only.get("path") == "" and str(only.get("type")).rsplit(".", 1)[-1] == RUNS_THE_MODEL:
        return None  # csekit export-st --layout remote-code: sentence-transformers runs this very model
    expected = layout_json(model, tokenizer)
    if not expected:
        return (f"it has sentence-transformers files (modules.json), but its model has no such layout "
                f"({sentence_transformers_layout_problem(model)})")
    for path, content in expected.items():
        try:
            found = json.loads((folder / path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return f"{path} is missing or unreadable; the config's layout needs it"
        difference = _first_difference(found, content, path)
        if difference:
            return difference
    return None


__all__ = ["ENCODER_FOLDER", "TOP_LEVEL_FILES", "dense_head_keys", "inherited_settings", "layout_disagreement",
           "layout_json", "save_weights", "sentence_transformers_layout_problem", "weights_with_dense_head",
           "write_json", "write_sentence_transformers_layout"]
