"""A model trained from a sentence-transformers folder keeps that folder's inference settings (``max_seq_length``,
``do_lower_case``, Normalize, similarity, prompts) unless the user sets them; the flags say which length is which."""

import json
import warnings

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from csekit.modeling import SimCSEModel
from csekit.recipes.simcse import RECIPE

SENTENCES = ["A man is playing a guitar.", "Markets rallied after the announcement of lower rates."]


def save(model, tokenizer, folder):
    model.tokenizer = tokenizer
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_model_from_a_sentence_transformers_folder_keeps_its_inference_settings(minilm_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    base = SentenceTransformer(str(minilm_path), device="cpu")
    model = SimCSEModel.from_encoder(str(minilm_path), pooler_type="avg")  # the base's own pooling, untrained
    assert model.config.max_length == 256 == base.max_seq_length  # not the tokenizer's 512
    folder = save(model, tokenizer, tmp_path / "trained")
    loaded = SentenceTransformer(str(folder), device="cpu")
    assert loaded.max_seq_length == 256 and loaded.similarity_fn_name == base.similarity_fn_name
    assert json.loads((folder / "modules.json").read_text())[-1]["type"].endswith("Normalize")
    # the same modules as the base: the same vectors (unit length, as the base's Normalize makes them)
    np.testing.assert_allclose(loaded.encode(SENTENCES), base.encode(SENTENCES), atol=1e-6)
    # csekit's own encode truncates where sentence-transformers does
    assert model.config.max_length == json.loads((folder / "encoder" / "sentence_bert_config.json").read_text())[
        "max_seq_length"]
    # a folder trained from it hands the settings on again; a length the user sets wins
    again = SimCSEModel.from_encoder(str(folder), pooler_type="avg")
    assert again.config.max_length == 256 and again.config.sentence_transformers_settings["normalize"] is True
    chosen = SimCSEModel.from_encoder(str(minilm_path), pooler_type="avg", max_length=128)
    assert SentenceTransformer(str(save(chosen, tokenizer, tmp_path / "chosen")), device="cpu").max_seq_length == 128


def test_a_plain_backbone_records_no_sentence_transformers_settings(tiny_backbone):
    model = SimCSEModel.from_encoder(str(tiny_backbone), pooler_type="cls")
    assert model.config.sentence_transformers_settings is None and model.config.max_length is None


def test_inference_length_flag_and_its_old_name(tmp_path):
    model_args, *_ = RECIPE.parse(["--inference_max_length", "64"])
    assert model_args.inference_max_length == 64
    with pytest.warns(UserWarning, match="--max_length is now --inference_max_length"):
        model_args, data_args, *_ = RECIPE.parse(["--max_length", "48", "--max_seq_length", "16"])
    assert (model_args.inference_max_length, data_args.max_seq_length) == (48, 16)  # two concepts, two flags
    config = tmp_path / "old.yaml"
    config.write_text("max_length: 40\n")
    with pytest.warns(UserWarning, match="max_length is now inference_max_length"):
        model_args, *_ = RECIPE.parse(["--config", str(config)])
    assert model_args.inference_max_length == 40
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RECIPE.parse(["--inference_max_length", "64"])  # the new name warns about nothing


def test_no_flags_have_their_own_help(capsys):
    with pytest.raises(SystemExit):
        RECIPE.parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--no_mlp_only_train, --no-mlp-only-train Turn --mlp_only_train off (the same as --mlp_only_train false)" \
        in text
