"""Fine-tuning a csekit model further: ``--model_name_or_path`` takes a folder saved by csekit (any method) and the
new run starts from its encoder, and from its head where the method's head is the same one.

The oracle is the saved folder itself: its weights, read with safetensors, not through csekit.
"""

import logging

import pytest
import torch

from conftest import load_weights, recipe_flags
from csekit import cli
from csekit.modeling import CLSRModel, CMLMCSEModel, SimCSEModel, WhitenedCSEModel
from csekit.modeling.modeling_cmlm_cse import CMLMCSEForPreTraining


@pytest.fixture(scope="module")
def trained_simcse(tmp_path_factory, tiny_backbone, corpus):
    """A csekit SimCSE folder trained 2 steps (its [CLS] MLP head trained too)."""
    out = tmp_path_factory.mktemp("continue") / "simcse"
    assert cli.main(["train", "simcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus),
                     "--output_dir", str(out), "--per_device_train_batch_size", "8", "--max_steps", "2",
                     "--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end", "false",
                     "--learning_rate", "1e-3", "--max_seq_length", "16", "--do_test_eval", "false",
                     *recipe_flags("simcse"), "--mlp_only_train", "false"]) == 0
    return out


@pytest.mark.parametrize("model_class, kwargs, takes_head", [
    (SimCSEModel, {"pooler_type": "cls", "mlp_only_train": False}, True),
    (CMLMCSEForPreTraining, {"pooler_type": "cls", "extractor_layers": 1, "fusion_layers": 1}, True),
    (WhitenedCSEModel, {"pooler_type": "cls", "num_groups": 16}, False),
    (CLSRModel, {"pooler_type": "cls"}, False),
], ids=["simcse", "cmlm_cse", "whitenedcse", "clsr"])
def test_every_method_continues_from_a_csekit_folder(model_class, kwargs, takes_head, trained_simcse, caplog):
    saved = load_weights(trained_simcse)  # encoder.* and mlp.* as written
    with caplog.at_level(logging.INFO):
        model = model_class.from_encoder(str(trained_simcse), **kwargs)
    state = model.state_dict()
    encoder = {name: tensor for name, tensor in saved.items() if name.startswith("encoder.")}
    assert encoder and all(torch.equal(state[name], tensor) for name, tensor in encoder.items())
    head = {name: tensor for name, tensor in saved.items() if name.startswith("mlp.")}
    taken = all(name in state and state[name].shape == tensor.shape and torch.equal(state[name], tensor)
                for name, tensor in head.items())
    assert taken == takes_head
    said = "continuing from its encoder and its head" if takes_head else "which starts fresh"
    assert said in caplog.text
    if isinstance(model, CMLMCSEModel):  # the auxiliary network is built from the continued encoder
        assert torch.equal(model.auxiliary.extractor.embeddings.word_embeddings.weight,
                           saved["encoder.embeddings.word_embeddings.weight"])


def test_the_recipe_trains_on_from_a_csekit_folder(trained_simcse, corpus, tmp_path):
    out = tmp_path / "further"
    assert cli.main(["train", "simcse", "--model_name_or_path", str(trained_simcse), "--train_file", str(corpus),
                     "--output_dir", str(out), "--per_device_train_batch_size", "8", "--max_steps", "1",
                     "--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end", "false",
                     "--max_seq_length", "16", "--do_test_eval", "false", *recipe_flags("simcse"),
                     "--mlp_only_train", "false"]) == 0
    assert load_weights(out).keys() == load_weights(trained_simcse).keys()


@pytest.mark.parametrize("method", ["simcse", "whitenedcse", "cmlm_cse", "clsr"])
def test_every_recipe_trains_on_from_a_csekit_folder(method, trained_simcse, tmp_path, data_dir):
    """The docs promise any method continues from any csekit folder: each recipe, as a user runs it."""
    from csekit.methods import get_method
    from test_conformance import recipe_argv

    nli = (data_dir / "nli" / "snli_devtest_pairs.tsv").read_text().splitlines()[1:]
    entailed = [line.split("\t")[1:3] for line in nli if line.endswith("\tentailment")][:64]
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sent0,sent1\n" + "".join(f'"{a}","{b}"\n' for a, b in entailed))
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join((data_dir / "wiki" / "wiki1m_for_simcse.txt").read_text().splitlines()[:96]) + "\n")
    argv = recipe_argv(get_method(method), trained_simcse, {"sentences": corpus, "pairs": pairs}, tmp_path / "out",
                       steps=1)
    assert cli.main(["train", method, *argv]) == 0
    saved, continued = load_weights(trained_simcse), load_weights(tmp_path / "out")
    assert any(name.startswith("encoder.") for name in continued) and continued.keys() >= {
        name for name in saved if name.startswith("encoder.")}
