"""LoRA through peft: low-rank adapters trained in place of a backbone's weights.

Turned on by ``--lora_r N`` (with ``--lora_alpha``, ``--lora_dropout``, ``--lora_target_modules``: the
[`CSETrainingArguments`][csekit.trainers.arguments.CSETrainingArguments]) or, in Python, by ``peft_config=LoraConfig(
...)`` given to a trainer, as trl's trainers take it. Both doors reach [`apply_lora`][csekit.trainers.lora.apply_lora]
from the trainer's constructor: peft's ``inject_adapter_in_model`` puts the adapters in the model's encoder and
freezes the encoder's own weights, so the adapters and the method's head train and the backbone's weights end as
they were loaded, bit for bit. Checkpoints hold the adapters (a resume continues them exactly); the published folder
holds the merged weights (``csekit.modeling.adapters``), a plain model that loads without peft.

The defaults are LLM2Vec's (BehnamGhader et al., 2024), whose SimCSE stage trains decoders with LoRA: its released
``initialize_peft`` adapts every linear layer of the decoder (q, k, v, o, gate, up and down projections: peft's
``all-linear``) with dropout 0.05, and its training scripts set ``lora_alpha`` to twice the rank.
"""

import re

import torch
from torch import nn

from ..errors import DataError
from ..modeling.adapters import adapted_layers

# LoraConfig fields csekit trains with as given; any other field must keep peft's default (a DoRA magnitude, a trained
# bias or a saved module would train more than the adapters, or merge by another formula)
LORA_SETTINGS = ("r", "lora_alpha", "lora_dropout", "target_modules", "exclude_modules", "use_rslora",
                 "init_lora_weights", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
                 "fan_in_fan_out")
# LoraConfig fields that do not change what trains or what is published
LORA_BOOKKEEPING = ("task_type", "peft_type", "auto_mapping", "peft_version", "base_model_name_or_path", "revision",
                    "inference_mode")
# initialisations that leave the base weights as loaded (True and "gaussian" start B at zero, False starts both A and
# B at random; PiSSA, OLoRA, LoftQ and the data-driven ones rewrite the base weights)
PLAIN_INITS = (True, False, "gaussian")
INSTALL = "pip install 'csekit[peft]'"


def import_peft():
    """The ``peft`` module, or one line naming the extra that installs it."""
    try:
        import peft
    except ImportError:
        raise DataError(f"LoRA needs peft, which is not installed: {INSTALL}") from None
    return peft


def lora_config(args, peft_config=None):
    """The ``LoraConfig`` a run trains with: ``peft_config`` as a Python caller gave it, else the one of ``args``'s
    ``--lora_*`` flags, else ``None`` (the whole model trains). Both at once, or a ``--lora_*`` flag without
    ``--lora_r``, is one line."""
    rank = getattr(args, "lora_r", None)
    if peft_config is not None and rank is not None:
        raise DataError(f"peft_config and --lora_r {rank}: give the adapters' settings once")
    if peft_config is not None:
        return peft_config
    if rank is None:
        alpha = getattr(args, "lora_alpha", None)
        if alpha is not None:
            raise DataError(f"--lora_alpha {alpha:g}: set --lora_r too (LoRA is off without a rank)")
        return None
    targets = list(getattr(args, "lora_target_modules", None) or ["all-linear"])
    alpha = args.lora_alpha if args.lora_alpha is not None else 2 * rank
    return import_peft().LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=args.lora_dropout, bias="none",
                                    target_modules=targets[0] if targets == ["all-linear"] else targets)


def check_lora_method(method, args=None, peft_config=None) -> None:
    """LoRA (from ``args`` or ``peft_config``) only where the registry's ``method`` can train it
    ([`Method.no_lora`][csekit.methods.Method]), with peft installed; one line otherwise."""
    if getattr(args, "lora_r", None) is None and peft_config is None:
        return
    if method is not None and method.no_lora:
        raise DataError(f"LoRA (--lora_r / peft_config): {method.name} {method.no_lora}; train it without adapters")
    import_peft()


def lora_settings(config) -> dict:
    """What a run record and ``training_args.json`` hold of a ``LoraConfig``: the settings csekit trains with, as
    JSON values."""
    settings = {}
    for name in LORA_SETTINGS:
        value = getattr(config, name, None)
        settings[name] = sorted(value) if isinstance(value, (set, frozenset)) else value
    return settings


def lora_group(config) -> dict:
    """The argument group a run built with ``config`` (a ``LoraConfig``, or ``None``) adds to its run record and
    ``training_args.json``: ``{"lora": {"peft_config": settings}}``, or ``{}`` without adapters."""
    return {} if config is None else {"lora": {"peft_config": lora_settings(config)}}


def check_lora_config(config) -> None:
    """A ``LoraConfig`` csekit trains exactly: plain LoRA (every field outside
    [`LORA_SETTINGS`][csekit.trainers.lora.LORA_SETTINGS] at peft's default), a positive rank and scaling, dropout in
    [0, 1), adapters that start at zero over the loaded weights, and trainable; else one line naming the field."""
    peft = import_peft()
    if not isinstance(config, peft.LoraConfig):
        raise DataError(f"peft_config: a {type(config).__name__}; csekit trains LoRA adapters (peft.LoraConfig)")
    default = peft.LoraConfig()
    for name in sorted(config.to_dict()):
        if name in LORA_SETTINGS or name in LORA_BOOKKEEPING:
            continue
        if getattr(config, name, None) != getattr(default, name, None):
            raise DataError(f"peft_config: {name}={getattr(config, name)!r}; csekit trains plain LoRA adapters (whose "
                            f"merge is W + scaling x B A), so leave {name} at peft's default "
                            f"{getattr(default, name)!r}")
    if config.inference_mode:
        raise DataError("peft_config: inference_mode=True freezes the adapters too, so nothing would train")
    if not (isinstance(config.r, int) and config.r >= 1):
        raise DataError(f"--lora_r {config.r}: the adapters' rank must be 1 or more")
    if not config.lora_alpha > 0:
        raise DataError(f"--lora_alpha {config.lora_alpha:g}: must be > 0 (the update is scaled by alpha / r)")
    if not 0 <= config.lora_dropout < 1:
        raise DataError(f"--lora_dropout {config.lora_dropout:g}: must be in [0, 1)")
    if config.init_lora_weights not in PLAIN_INITS:
        raise DataError(f"peft_config: init_lora_weights={config.init_lora_weights!r} rewrites the backbone's weights "
                        f"before training; use one of {', '.join(map(repr, PLAIN_INITS))}")


def linear_layer_names(encoder: nn.Module) -> list:
    """The distinct last names of ``encoder``'s linear layers (``q_proj``, ``dense``, ...), what
    ``--lora_target_modules`` names."""
    return sorted({name.rsplit(".", 1)[-1] for name, module in encoder.named_modules()
                   if isinstance(module, nn.Linear) and name})


def check_targets(encoder: nn.Module, targets, backbone: str) -> None:
    """Every named target (a module's last name, or its dotted path's end) is a layer of ``encoder``, and a pattern
    (peft reads a string as a regular expression on the whole name) matches one; else one line naming the backbone's
    linear layers. (peft adapts the targets it finds and drops the others without a word.)"""
    names = [name for name, _ in encoder.named_modules() if name]
    if isinstance(targets, str):
        found = targets == "all-linear" or any(re.fullmatch(targets, name) for name in names)
        missing = [] if found else [targets]
    else:
        missing = [target for target in targets or ()
                   if not any(name == target or name.endswith(f".{target}") for name in names)]
    if missing or not targets:
        raise DataError(f"--lora_target_modules {' '.join(missing) or '(none)'}: {backbone} has no such layer; its "
                        f"linear layers are {', '.join(linear_layer_names(encoder))} (or all-linear)")


def apply_lora(model, config, args=None) -> None:
    """Put ``config``'s adapters (a checked ``LoraConfig``) into ``model.encoder`` with peft, which freezes the
    encoder's own weights; the method's head outside the encoder keeps training (gradient checkpointing needs nothing
    more: transformers makes the frozen embeddings' output require gradients for it). The adapters' random first
    values are drawn from a generator seeded with ``args.seed`` (the global generators are left as they were), so
    they are the run's whatever ran before. A model that already holds adapters, and engines that shard the weights
    (the merge at the end reads them whole), are one line."""
    peft = import_peft()
    check_lora_config(config)
    if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
        raise DataError("LoRA: FSDP and DeepSpeed shard the weights, which the published merge reads whole; train the "
                        "adapters with DDP (accelerate launch --multi_gpu)")
    encoder = model.encoder
    if adapted_layers(encoder):
        raise DataError("LoRA: the model already holds adapters; pass the model without peft_config / --lora_r to "
                        "train them further, or a model without adapters")
    check_targets(encoder, config.target_modules, encoder.config.model_type)
    device = next(encoder.parameters()).device
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        torch.manual_seed(getattr(args, "seed", 42))  # the adapters' first values follow the run's seed alone
        peft.inject_adapter_in_model(config, encoder)
    trainable = [name for name, parameter in encoder.named_parameters() if parameter.requires_grad]
    if not trainable or any("lora_" not in name for name in trainable):  # peft's contract, relied on here
        raise DataError(f"LoRA: peft left {len(trainable)} trainable encoder weight(s) that are not adapters")


__all__ = ["apply_lora", "check_lora_config", "check_lora_method", "check_targets", "import_peft", "linear_layer_names",
           "lora_config", "lora_group", "lora_settings"]
