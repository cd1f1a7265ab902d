"""The sentence-transformers files of a csekit model folder, so one folder loads with both libraries:

    AutoModel.from_pretrained(folder)        # csekit registered (import csekit) or trust_remote_code=True
    SentenceTransformer(folder)              # sentence-transformers alone: no csekit, no remote code

Layout (written by ``save_pretrained`` when the model knows its tokenizer)::

    config.json, tokenizer files             the csekit model, as transformers saves it
    model.safetensors.index.json             the csekit weights: encoder.* -> encoder/model.safetensors,
    model-head.safetensors                   the rest (pooler head, whitening) here
    encoder/                                 sentence-transformers' Transformer module: the backbone's own
        config.json, tokenizer files         config and tokenizer, the same weight file (read with the key
        model.safetensors                    mapping encoder.X -> X), sentence_bert_config.json
    1_Pooling/config.json                    cls or mean over the last layer
    2_Dense/, 3_Dense/                       the inference head as Linear + activation modules, when it has one
    modules.json, config_sentence_transformers.json

Every weight is stored once: the index of the csekit model points into ``encoder/``, so neither the folder, the Hub
repository nor the Hugging Face cache holds the backbone twice (the Dense modules copy the head, a few kB to MB).

A model whose inference is not backbone -> last-layer [CLS] or mean -> Linear/activation chain (the multi-layer
poolers ``avg_first_last``, ``avg_top2``, ``layers``; WhitenedCSE's whitened representations) gets no
sentence-transformers files; :func:`sentence_transformers_layout_problem` says why, the model card repeats it, and
``csekit export-st --layout remote-code`` covers it.
"""

import json
import os
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file
from torch import nn

ENCODER_FOLDER = "encoder"
HEAD_WEIGHTS = "model-head.safetensors"
INDEX_FILE = "model.safetensors.index.json"
POOLING_MODES = {"cls": "cls", "cls_before_pooler": "cls", "avg": "mean"}
# files of the layout at the folder's top level (a folder committed over an older model replaces or removes them)
TOP_LEVEL_FILES = ("modules.json", "config_sentence_transformers.json")
ST_MODULES = {"Transformer": "sentence_transformers.base.modules.Transformer",
              "Pooling": "sentence_transformers.sentence_transformer.modules.Pooling",
              "Dense": "sentence_transformers.base.modules.Dense",
              "Normalize": "sentence_transformers.base.modules.Normalize"}
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
    return None


def _save_weights(tensors: dict, path: Path) -> None:
    """safetensors' ``save_file`` with the mode ``open()`` gives under the umask (it writes owner-only files)."""
    save_file(tensors, path, metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def _split_weights(folder: Path, prefix: str) -> None:
    """Rewrite ``model.safetensors`` as ``encoder/model.safetensors`` (``prefix.*``) + ``model-head.safetensors``
    (the rest) + the index that transformers reads; a sharded save (over ``max_shard_size``) stays as it is."""
    weights = load_file(folder / "model.safetensors")
    encoder = {key: value for key, value in weights.items() if key.startswith(prefix + ".")}
    head = {key: value for key, value in weights.items() if not key.startswith(prefix + ".")}
    (folder / ENCODER_FOLDER).mkdir(exist_ok=True)
    _save_weights(encoder, folder / ENCODER_FOLDER / "model.safetensors")
    weight_map = dict.fromkeys(encoder, f"{ENCODER_FOLDER}/model.safetensors")
    if head:
        _save_weights(head, folder / HEAD_WEIGHTS)
        weight_map.update(dict.fromkeys(head, HEAD_WEIGHTS))
    size = sum(value.numel() * value.element_size() for value in weights.values())
    _write_json(folder / INDEX_FILE, {"metadata": {"total_size": size}, "weight_map": dict(sorted(weight_map.items()))})
    os.remove(folder / "model.safetensors")


def _accepts(model_class, argument: str) -> bool:
    import inspect

    return argument in inspect.signature(model_class.__init__).parameters


def write_sentence_transformers_layout(model, folder, tokenizer) -> bool:
    """Add the sentence-transformers files to ``folder``, which ``model.save_pretrained`` has just written.

    Returns whether they were written (see :func:`sentence_transformers_layout_problem`).
    """
    folder = Path(folder)
    if sentence_transformers_layout_problem(model) or not (folder / "model.safetensors").is_file():
        return False
    prefix = model.base_model_prefix
    _split_weights(folder, prefix)
    encoder_folder = folder / ENCODER_FOLDER
    model.encoder.config.to_json_file(encoder_folder / "config.json")
    tokenizer.save_pretrained(encoder_folder)
    model_kwargs = {"key_mapping": {rf"^{prefix}\.": ""}}  # the csekit keys, read by the bare backbone class
    if _accepts(type(model.encoder), "add_pooling_layer") and getattr(model.encoder, "pooler", None) is None:
        model_kwargs["add_pooling_layer"] = False  # csekit drops BERT's tanh pooler, so there is none to load
    settings = model.config.sentence_transformers_settings or {}
    max_length = model.config.max_length or (tokenizer.model_max_length if tokenizer.model_max_length < 10**6
                                             else None)
    _write_json(encoder_folder / "sentence_bert_config.json",
                {"max_seq_length": max_length, "do_lower_case": settings.get("do_lower_case", False),
                 "model_kwargs": model_kwargs})
    hidden = model.config.hidden_size
    modules = [{"idx": 0, "name": "0", "path": ENCODER_FOLDER, "type": ST_MODULES["Transformer"]},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_MODULES["Pooling"]}]
    _write_json(folder / "1_Pooling" / "config.json", {"embedding_dimension": hidden,
                                                       "pooling_mode": POOLING_MODES[model.config.pooler_type],
                                                       "include_prompt": True})
    for index, (linear, activation) in enumerate(model.inference_head_layers(), start=2):
        path = f"{index}_Dense"
        _write_json(folder / path / "config.json", {
            "in_features": linear.in_features, "out_features": linear.out_features, "bias": linear.bias is not None,
            "activation_function": ACTIVATIONS[type(activation)]})
        state = {"linear.weight": linear.weight.detach().to("cpu", torch.float32).contiguous()}
        if linear.bias is not None:
            state["linear.bias"] = linear.bias.detach().to("cpu", torch.float32).contiguous()
        _save_weights(state, folder / path / "model.safetensors")
        modules.append({"idx": index, "name": str(index), "path": path,
                        "type": ST_MODULES["Dense"]})
    if settings.get("normalize"):  # the base model's Normalize module (it has no files)
        index = len(modules)
        modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize",
                        "type": ST_MODULES["Normalize"]})
    _write_json(folder / "modules.json", modules)
    _write_json(folder / "config_sentence_transformers.json",
                {"model_type": "SentenceTransformer", "prompts": settings.get("prompts", {}),
                 "default_prompt_name": settings.get("default_prompt_name"),
                 "similarity_fn_name": settings.get("similarity_fn_name", "cosine")})
    return True


__all__ = ["TOP_LEVEL_FILES", "inherited_settings", "sentence_transformers_layout_problem",
           "write_sentence_transformers_layout"]
