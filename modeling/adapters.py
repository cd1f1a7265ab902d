"""Low-rank adapters in a csekit model: the published weights of a model trained with LoRA.

A model trained with ``--lora_r`` (``trainers/lora.py``) holds peft's LoRA layers inside its encoder: each adapted
linear layer keeps its frozen weight as ``base_layer`` beside the adapter's ``lora_A`` and ``lora_B``. Training
checkpoints store them so (a resume continues the adapters exactly). A published folder stores the merged weights
under the backbone's own names, ``W + scaling * B @ A`` as peft's ``merge_and_unload`` computes it: a plain folder that
``AutoModel`` and sentence-transformers load without peft. Nothing here imports peft; a layer is recognised by what
peft's LoRA layers have (``base_layer`` and ``get_delta_weight``).
"""

from typing import Optional

import torch
from torch import nn

BASE_LAYER = "base_layer"


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


__all__ = ["adapted_layers", "merged_state_dict"]
