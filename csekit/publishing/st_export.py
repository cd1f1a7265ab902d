"""Export a csekit model folder as a sentence-transformers model with identical embeddings.

Two layouts:

* ``plain``: a standard ``Transformer`` + ``Pooling`` folder (no custom code, ``SentenceTransformer(folder)``),
  possible when the model's inference path is the backbone followed by [CLS] or mean pooling of the last layer
  with no head (SimCSE with ``avg`` / ``cls_before_pooler`` / ``cls`` + ``mlp_only_train``, and any other class
  whose inference head is the identity);
* ``remote-code``: the csekit model itself (weights, ``auto_map`` code, tokenizer) driven by the
  `CSEKitEncoder` module shipped in the folder; works for every csekit model and
  loads with ``SentenceTransformer(folder, trust_remote_code=True)``.

``auto`` picks ``plain`` when possible. Either way the export encodes probe sentences with both models and
refuses to finish unless every embedding matches ``model.encode`` to ``1e-5``; the folder is built next to
``out_dir`` and moved into place only then, so a failed export leaves nothing half-written.
"""

import json
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from transformers import AutoModel

from ..atomic import staged_folder, work_folder, write_json, write_text
from ..errors import DataError
from ..loading import resolve_model_path
from ..modeling import SentenceEncoderPreTrainedModel
from ..modeling.sentence_transformers_layout import POOLING_MODES
from ..preflight import check_model_inputs, check_output_dir, load_tokenizer, read_model_config

LAYOUTS = ("auto", "plain", "remote-code")
ST_MODULE_FILE = Path(__file__).with_name("csekit_st.py")
PROBE_SENTENCES = (
    "A man is playing a guitar.",
    "Two dogs run across a snowy field while their owner watches from the porch.",
    "stocks fell sharply on monday",
    "Is this the right way to the station?",
    "The committee, after a long and occasionally heated discussion about the budget, postponed the vote.",
    "ok",
)
TOLERANCE = 1e-5


def load_csekit_model(model_dir) -> SentenceEncoderPreTrainedModel:
    path = resolve_model_path(str(model_dir))
    config = read_model_config(path)
    if not config["model_type"].startswith("csekit-"):
        raise DataError(f"{model_dir}: not a csekit model (model_type {config['model_type']!r})")
    tokenizer = load_tokenizer(str(model_dir), path)
    check_model_inputs(str(model_dir), config, tokenizer, None, "--max-length")
    model = AutoModel.from_pretrained(path, local_files_only=True)
    model.tokenizer = tokenizer
    return model.eval()


def plain_layout_possible(model: SentenceEncoderPreTrainedModel) -> bool:
    """Whether inference is backbone -> last-layer [CLS] or mean -> identity head (so ST's own modules suffice); a
    bidirectional decoder is not: sentence-transformers' Transformer module would load it causal."""
    if model.config.pooler_type not in POOLING_MODES or model.config.bidirectional:
        return False
    probe = torch.randn(3, model.config.hidden_size)
    with torch.inference_mode():
        return torch.equal(model.head(probe), probe)


def max_seq_length(model: SentenceEncoderPreTrainedModel) -> Optional[int]:
    """The truncation ``encode`` applies: the config's ``max_length`` or the tokenizer's model maximum."""
    if model.config.max_length:
        return model.config.max_length
    limit = model.tokenizer.model_max_length
    return limit if limit < 10**6 else None  # tokenizers without a maximum report a huge sentinel


def build_plain(model: SentenceEncoderPreTrainedModel, work_dir: Path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    backbone_dir = work_dir / "backbone"
    model.encoder.save_pretrained(backbone_dir)
    model.tokenizer.save_pretrained(backbone_dir)
    transformer = Transformer(str(backbone_dir), max_seq_length=max_seq_length(model))
    pooling = Pooling(model.config.hidden_size, pooling_mode=POOLING_MODES[model.config.pooler_type])
    return SentenceTransformer(modules=[transformer, pooling], device="cpu")


def build_remote_code(model: SentenceEncoderPreTrainedModel, dimension: int):
    from sentence_transformers import SentenceTransformer

    from .csekit_st import CSEKitEncoder

    module = CSEKitEncoder(model, model.tokenizer, max_seq_length=model.config.max_length,
                           embedding_dimension=dimension)
    return SentenceTransformer(modules=[module], device="cpu")


def export_card(source: str, name: str, layout: str) -> str:
    """The csekit card of the source model as the export's card: ``library_name: sentence-transformers`` and the
    sentence-transformers usage of this folder in place of the csekit loading section (results kept)."""
    from huggingface_hub import ModelCard

    card = ModelCard(source)
    card.data.library_name = "sentence-transformers"
    card.data.tags = list(dict.fromkeys([*(card.data.tags or []), "sentence-transformers"]))
    trust = ", trust_remote_code=True" if layout == "remote-code" else ""
    usage = (
        "## How to load\n\n"
        f"A sentence-transformers export ({layout} layout) of a csekit model; its embeddings equal the csekit "
        "model's `encode` to 1e-5 (checked when it was written).\n\n"
        "```python\nfrom sentence_transformers import SentenceTransformer\n\n"
        f'model = SentenceTransformer("{name}"{trust})\n'
        'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])\n```\n\n'
    )
    text = card.text
    start = text.find("## How to load")
    end = text.find("\n## ", start + 1) if start >= 0 else -1
    text = text[:start] + usage + text[end + 1:] if start >= 0 and end >= 0 else usage + text
    return f"---\n{card.data.to_yaml()}\n---\n{text}"


def export_sentence_transformers(model_dir, out_dir, layout: str = "auto", overwrite: bool = False) -> dict:
    """Write ``out_dir`` as a sentence-transformers model of the csekit model in ``model_dir``.

    Returns:
        ``{"layout": "plain" | "remote-code", "max_abs_difference": float, "out_dir": str}``.
    """
    from sentence_transformers import SentenceTransformer

    if layout not in LAYOUTS:
        raise DataError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    out_dir = check_output_dir(out_dir, "OUT_DIR", inputs=[model_dir, resolve_model_path(str(model_dir))])
    if out_dir.exists() and not overwrite:
        raise DataError(f"{out_dir} already exists (pass --overwrite to replace it)")
    model = load_csekit_model(model_dir)
    can_be_plain = plain_layout_possible(model)
    if layout == "plain" and not can_be_plain:
        raise DataError(f"{model_dir}: pooler {model.config.pooler_type!r} / its head have no plain "
                        "sentence-transformers equivalent; use --layout remote-code")
    chosen = "plain" if layout == "plain" or (layout == "auto" and can_be_plain) else "remote-code"
    expected = model.encode(list(PROBE_SENTENCES), convert_to_numpy=True)
    with work_folder(out_dir) as work, staged_folder(out_dir, replace=overwrite, flag="OUT_DIR") as staged:
        if chosen == "plain":
            build_plain(model, Path(work)).save(str(staged), create_model_card=False)
        else:
            build_remote_code(model, expected.shape[1]).save(str(staged), create_model_card=False)
            shutil.copy(ST_MODULE_FILE, staged / ST_MODULE_FILE.name)
            modules = json.loads((staged / "modules.json").read_text())
            modules[0]["type"] = f"{ST_MODULE_FILE.stem}.CSEKitEncoder"  # the copy in the folder, not csekit's
            write_json(staged / "modules.json", modules)
        card = Path(resolve_model_path(str(model_dir))) / "README.md"
        if card.is_file():
            write_text(staged / "README.md", export_card(card.read_text(), out_dir.name, chosen))
        loaded = SentenceTransformer(str(staged), device="cpu", local_files_only=True,
                                     trust_remote_code=chosen == "remote-code")
        actual = loaded.encode(list(PROBE_SENTENCES), convert_to_numpy=True)
        difference = float(np.abs(actual - expected).max()) if actual.shape == expected.shape else float("inf")
        if not difference <= TOLERANCE:
            raise DataError(f"export check failed: sentence-transformers embeddings differ from model.encode by "
                            f"{difference:.2e} (> {TOLERANCE:g}); nothing was written")
    return {"layout": chosen, "max_abs_difference": difference, "out_dir": str(out_dir)}


__all__ = ["LAYOUTS", "export_card", "export_sentence_transformers", "plain_layout_possible"]
