"""Low-rank adapters in a csekit model: the published weights of a model trained with LoRA.

A model trained with ``--lora_r`` (``trainers/lora.py``) holds peft's LoRA layers inside its encoder: each adapted
linear layer keeps its frozen weight as ``base_layer`` beside the adapter's ``lora_A`` and ``lora_B``. Training
checkpoints store them so (a resume continues the adapters exactly). A published folder stores the merged weights
under the backbone's own names, ``W + scaling * B @ A`` as peft's ``merge_and_unload`` computes it: a plain folder that
``AutoModel`` and sentence-transformers load without peft. The merge imports nothing of peft; a layer is recognised by
what peft's LoRA layers have (``base_layer`` and ``get_delta_weight``).

With ``save_adapter`` the folder also holds ``adapter/``: the trained adapter as a sentence-transformers folder of
its own (`write_adapter_folder`), the Transformer module being peft's adapter files (``adapter_config.json`` naming
the backbone's Hub id, ``adapter_model.safetensors``) at its top, where sentence-transformers and transformers load
an adapter over the base model they download; the pooling, head and prompts are the model's.
"""

import json
import os
import re
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from .sentence_transformers_layout import (
    ENCODER_FOLDER,
    dense_head_keys,
    layout_json,
    save_weights,
    sentence_transformers_layout_problem,
    write_json,
)

BASE_LAYER = "base_layer"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # the key prefix of peft's saved adapters (PeftModel.save_pretrained's)
ADAPTER_NAME = "default"  # peft's name of the one adapter csekit trains
ADAPTER_FOLDER = "adapter"  # the sub-folder of a model folder that --save_adapter writes
# a snapshot folder of the Hugging Face cache (csekit.loading's SNAPSHOT_PATH; this file travels with the model code)
CACHE_SNAPSHOT = re.compile(r"models--(?P<repo>[^/]+)/snapshots/[0-9a-f]{40}$")


def adapted_layers(model: nn.Module) -> dict:
    """``{module name: layer}`` of ``model``'s LoRA layers (peft's), outermost first; ``{}`` without adapters."""
    return {name: module for name, module in model.named_modules()
            if isinstance(getattr(module, BASE_LAYER, None), nn.Module) and hasattr(module, "get_delta_weight")}


def merged_state_dict(model: nn.Module, state_dict: Optional[dict] = None) -> Optional[dict]:
    """``model``'s weights (or ``state_dict``, its own) with every LoRA layer merged: the adapter's update added to
    its base weight, stored under the base layer's own name, and the adapter tensors left out. ``None`` when the model
    has no adapters. The update is the layer's own ``get_delta_weight`` for each active adapter, in float32, added
    to the base weight in its dtype; a layer peft has already merged adds nothing."""
    layers = adapted_layers(model)
    if not layers:
        return None
    state = dict(model.state_dict() if state_dict is None else state_dict)
    for name, layer in layers.items():
        prefix = f"{name}." if name else ""
        merged = state.get(f"{prefix}{BASE_LAYER}.weight")
        if merged is not None and not getattr(layer, "merged", False):
            delta = sum(layer.get_delta_weight(adapter).detach().to(torch.float32)
                        for adapter in layer.active_adapters if adapter in getattr(layer, "lora_A", {}))
            merged = (merged.to(torch.float32) + delta).to(merged.dtype)
        for key in [key for key in state if key.startswith(prefix)]:
            rest = key[len(prefix):]
            value = state.pop(key)
            if rest.startswith(f"{BASE_LAYER}."):
                state[f"{prefix}{rest[len(BASE_LAYER) + 1:]}"] = merged if rest == f"{BASE_LAYER}.weight" else value
            elif not rest.startswith("lora_"):
                state[key] = value
    return state


def base_hub_id(name_or_path: str) -> Optional[str]:
    """The Hub id of the backbone ``name_or_path`` (what ``from_pretrained`` was given): a Hub id itself, or the repo
    of a Hugging Face cache snapshot folder (``.../models--org--name/snapshots/<commit>``, where csekit's commands
    resolve a Hub id); ``None`` for any other local folder."""
    folder = Path(name_or_path).expanduser()
    if folder.exists():
        match = CACHE_SNAPSHOT.search(folder.resolve().as_posix())
        return match.group("repo").replace("--", "/") if match else None
    if name_or_path.startswith((".", "/", "~")) or os.path.isabs(name_or_path):
        return None
    return name_or_path


def adapter_folder_problem(model: nn.Module) -> Optional[str]:
    """Why ``model``'s adapter cannot be published as an adapter folder, or ``None``. The folder names the backbone
    the adapter applies to, which its users download, so that backbone must be a Hub id (a local folder or a csekit
    model's encoder is nothing they can fetch); the model must hold adapters and have a sentence-transformers
    layout (the folder is one)."""
    encoder = model.encoder
    if not adapted_layers(encoder):
        return "the model holds no LoRA adapters (train with --lora_r or peft_config)"
    base = getattr(encoder, "name_or_path", "") or ""
    if not base:
        return ("its backbone was not loaded from a Hub id (a csekit model's encoder, or built from a config), so the "
                "adapter could name no base model")
    if base_hub_id(base) is None:
        return (f"its backbone is the local folder {base}, which the adapter folder's users do not have; train from "
                "the backbone's Hub id")
    problem = sentence_transformers_layout_problem(model)
    return f"it has no sentence-transformers layout ({problem})" if problem else None


def write_adapter_folder(model: nn.Module, folder, tokenizer) -> None:
    """``model``'s trained adapter as a sentence-transformers folder at ``folder``: the model's own layout
    (`layout_json`: pooling, Dense head, prompts, length) with its Transformer module at the top, whose weights are
    the adapter as peft saves one: ``adapter_config.json`` (the run's ``LoraConfig``, ``base_model_name_or_path`` the
    backbone's Hub id, inference mode) and ``adapter_model.safetensors`` (peft's own ``get_peft_model_state_dict``,
    under peft's ``base_model.model.`` keys). No ``config.json``: transformers reads a folder with one as a whole
    model."""
    from peft import get_peft_model_state_dict

    folder = Path(folder)
    encoder = model.encoder
    for path, content in layout_json(model, tokenizer).items():
        if path == "modules.json":
            content = [{**entry, "path": "" if entry["path"] == ENCODER_FOLDER else entry["path"]} for entry in content]
        elif path.startswith(f"{ENCODER_FOLDER}/"):
            path = path.removeprefix(f"{ENCODER_FOLDER}/")
            content = {**content, "model_kwargs": {key: value for key, value in content["model_kwargs"].items()
                                                   if key != "key_mapping"}}  # (the base model's keys are its own)
        write_json(folder / path, content)
    tokenizer.save_pretrained(folder)
    state = model.state_dict()
    dense = {}
    for key, (dense_folder, st_key) in dense_head_keys(model).items():
        dense.setdefault(dense_folder, {})[st_key] = state[key].detach().to("cpu", torch.float32).contiguous()
    for dense_folder, weights in dense.items():
        save_weights(weights, folder / dense_folder / "model.safetensors")
    settings = encoder.peft_config[ADAPTER_NAME].to_dict()
    settings.update(base_model_name_or_path=base_hub_id(encoder.name_or_path), inference_mode=True, revision=None)
    settings = {key: sorted(value) if isinstance(value, (set, frozenset)) else value for key, value in settings.items()}
    (folder / ADAPTER_CONFIG).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    weights = get_peft_model_state_dict(encoder, adapter_name=ADAPTER_NAME, save_embedding_layers=False)
    save_weights({f"{PEFT_PREFIX}{key}": value.detach().to("cpu").contiguous() for key, value in weights.items()},
                 folder / ADAPTER_WEIGHTS)


__all__ = ["ADAPTER_CONFIG", "ADAPTER_FOLDER", "ADAPTER_WEIGHTS", "adapted_layers", "adapter_folder_problem",
           "base_hub_id", "merged_state_dict", "write_adapter_folder"]
