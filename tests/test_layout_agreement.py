"""csekit reads its own folders the way users will: a csekit folder whose sentence-transformers files say another
model than its config (pooling, truncation length, prompt, modules, a Dense activation) is refused in one line naming
the file, the setting and both values, at load (``AutoModel.from_pretrained``, ``csekit evaluate``) and at push, since
``SentenceTransformer(folder)``, the card's own snippet, would give other vectors than csekit scores. The record's
dimension is the vectors'."""

import json
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoModel

from conftest import tiny_bert_config
from csekit import cli
from csekit.evaluation import load_embedder
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.modeling.errors import LayoutDisagreement
from csekit.publishing.hub import files_to_push

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach."]


def edit_json(path, **changes):
    value = json.loads(path.read_text())
    path.write_text(json.dumps({**value, **changes}) if isinstance(value, dict) else json.dumps(changes["modules"]))


EDITS = {
    "pooling": (lambda f: edit_json(f / "1_Pooling" / "config.json", pooling_mode="mean"),
                '1_Pooling/config.json pooling_mode is "mean" where the config gives "cls"'),
    "max length": (lambda f: edit_json(f / "encoder" / "sentence_bert_config.json", max_seq_length=16),
                   "encoder/sentence_bert_config.json max_seq_length is 16 where the config gives 64"),
    "prompt": (lambda f: edit_json(f / "config_sentence_transformers.json", prompts={"query": "query: "},
                                   default_prompt_name="query"),
               'config_sentence_transformers.json default_prompt_name is "query" where the config gives null'),
    "activation": (lambda f: edit_json(f / "2_Dense" / "config.json",
                                       activation_function="torch.nn.modules.activation.ReLU"),
                   "2_Dense/config.json activation_function is"),
    "a module dropped": (lambda f: edit_json(f / "modules.json", modules=json.loads(
        (f / "modules.json").read_text())[:2]), "modules.json is Transformer(encoder) > Pooling(1_Pooling) where"),
}


@pytest.fixture(scope="module")
def supervised_folder(tmp_path_factory, tokenizer):
    """A supervised SimCSE folder ([CLS] and its MLP kept at inference: a Dense module), length 64."""
    folder = tmp_path_factory.mktemp("agreement") / "sup"
    torch.manual_seed(0)
    config = SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="cls", mlp_only_train=False,
                          max_length=64)
    model = SimCSEModel(config)
    model.tokenizer = tokenizer
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("edit, words", EDITS.values(), ids=EDITS)
def test_a_csekit_folder_whose_sentence_transformers_files_disagree_is_refused(supervised_folder, tmp_path, edit,
                                                                                words, capsys):
    folder = tmp_path / "edited"
    shutil.copytree(supervised_folder, folder)
    edit(folder)
    with pytest.raises(LayoutDisagreement) as error:
        AutoModel.from_pretrained(folder)
    assert words in str(error.value) and "\n" not in str(error.value)
    scores = dict.fromkeys(("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"), 1.0)
    (folder / "eval_results.json").write_text(json.dumps({"model": "sup", "pooler": "cls", "sts": scores}))
    (folder / "README.md").write_text("card\n")
    with pytest.raises(LayoutDisagreement, match="save the model again with csekit"):
        files_to_push(folder)  # what `csekit push` and trainer.push_to_hub upload
    output = tmp_path / "scores.json"
    assert cli.main(["evaluate", str(folder), "--tasks", "sts", "--output", str(output)]) == 2
    assert words in capsys.readouterr().err and not output.exists()


def test_an_agreeing_folder_loads_and_a_deliberate_override_is_taken(supervised_folder, saved_tiny_model):
    from sentence_transformers import SentenceTransformer

    embed, info = load_embedder(str(supervised_folder), device="cpu")
    expected = SentenceTransformer(str(supervised_folder), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(embed(SENTENCES), expected, atol=1e-5, rtol=0)
    assert info["dimension"] == expected.shape[1]
    _, overridden = load_embedder(str(saved_tiny_model), pooler="cls", device="cpu")  # --pooler: asked for
    assert overridden["pooler"] == "cls"


def test_the_records_dimension_is_the_vectors(supervised_folder, monkeypatch):
    """Whatever a config declares, the record holds the length of the vectors scored."""
    import csekit.evaluation.encoders as encoders

    monkeypatch.setattr(SimCSEConfig, "embedding_size", property(lambda self: 7))  # a config that misdeclares
    embed, info = encoders.load_embedder(str(supervised_folder), device="cpu")
    assert info["dimension"] == embed(SENTENCES).shape[1] == 32
