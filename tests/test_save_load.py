"""Save -> load round trips: AutoModel with csekit imported, and trust_remote_code where csekit is absent."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModel
from transformers.trainer_utils import load_sharded_checkpoint

from conftest import run_isolated_python, tiny_bert_config, tiny_roberta_config
from csekit.modeling import SimCSEConfig, SimCSEModel

SENTENCES = ["A man is playing a guitar.", "Stocks fell sharply.", "the cat sleeps"]


@pytest.fixture(params=["bert", "roberta"])
def saved_model(request, tmp_path, tokenizer):
    backbone = tiny_bert_config if request.param == "bert" else tiny_roberta_config
    model = SimCSEModel(SimCSEConfig(encoder_config=backbone().to_dict(), pooler_type="cls", mlp_only_train=False))
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return model, tmp_path


def test_saved_folder_is_self_contained(saved_model):
    model, folder = saved_model
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {"AutoConfig": "configuration_simcse.SimCSEConfig",
                                  "AutoModel": "modeling_simcse.SimCSEModel"}
    for code in ("configuration_simcse.py", "configuration_encoder.py", "modeling_simcse.py", "modeling_encoder.py",
                 "pooling.py", "pooler_types.py", "encoding.py", "packing.py", "sentence_transformers_layout.py"):
        assert (folder / code).is_file(), code
    # the weights: the backbone's in encoder/, the inference head's in 2_Dense/ (where sentence-transformers reads
    # them), each stored once
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index.values()) == {"encoder/model.safetensors", "2_Dense/model.safetensors"}
    assert not (folder / "model-head.safetensors").exists() and not list(folder.rglob("*.bin"))
    stored = 0
    for path in folder.rglob("*.safetensors"):
        with safe_open(str(path), "pt") as weights:
            stored += sum(int(np.prod(weights.get_slice(key).get_shape())) for key in weights.keys())
    assert stored == sum(tensor.numel() for tensor in model.state_dict().values())


def test_a_checkpoint_keeps_the_head_in_the_index_the_trainer_resumes_from(saved_model, tmp_path):
    model, _ = saved_model
    model.saving_checkpoint = True
    try:
        model.save_pretrained(tmp_path / "checkpoint")
    finally:
        model.saving_checkpoint = False
    fresh = SimCSEModel(model.config)
    load_sharded_checkpoint(fresh, tmp_path / "checkpoint", strict=True)  # the Trainer's resume: keys by name
    for key, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], tensor), key


def test_config_json_alone_rebuilds_the_architecture(saved_model):
    model, folder = saved_model
    rebuilt = AutoModel.from_config(AutoConfig.from_pretrained(folder))
    assert isinstance(rebuilt, SimCSEModel)
    assert rebuilt.state_dict().keys() == model.state_dict().keys()
    def architecture(config):  # dtype is bookkeeping that save_pretrained fills in
        return {k: v for k, v in config.to_dict().items() if k != "dtype"}

    assert architecture(rebuilt.config.encoder_config) == architecture(model.config.encoder_config)


def test_automodel_round_trip_reproduces_embeddings(saved_model):
    model, folder = saved_model
    loaded = AutoModel.from_pretrained(folder)
    assert type(loaded) is SimCSEModel
    np.testing.assert_array_equal(loaded.encode(SENTENCES), model.encode(SENTENCES))


def test_trust_remote_code_without_csekit_reproduces_embeddings(saved_model, tmp_path_factory):
    model, folder = saved_model
    expected = model.encode(SENTENCES)
    workdir = tmp_path_factory.mktemp("clean")
    code = (
        "import numpy, json\n"
        "from transformers import AutoModel\n"
        f"model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
        "assert 'transformers_modules' in type(model).__module__, type(model).__module__\n"
        f"numpy.save('out.npy', model.encode({SENTENCES!r}))\n"
    )
    result = run_isolated_python(code, cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_array_equal(np.load(workdir / "out.npy"), expected)


def test_from_encoder_keeps_pretrained_weights(minilm_path):
    model = SimCSEModel.from_encoder(str(minilm_path), pooler_type="avg")
    reference = AutoModel.from_pretrained(minilm_path)
    for name, tensor in reference.state_dict().items():
        if not name.startswith("pooler."):
            assert torch.equal(model.encoder.state_dict()[name], tensor), name
    assert model.config.encoder_config.hidden_size == 384 and model.config.name_or_path == str(minilm_path)


def test_half_precision_checkpoints_are_trained_and_scored_in_float32(tmp_path, tokenizer):
    """transformers 5 keeps a checkpoint's stored dtype; csekit trains (master weights) and scores in float32."""
    from transformers import BertModel

    from csekit.evaluation.encoders import load_embedder

    BertModel(tiny_bert_config(max_position_embeddings=512)).to(torch.bfloat16).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model = SimCSEModel.from_encoder(str(tmp_path), pooler_type="avg")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    embed, _ = load_embedder(str(tmp_path), pooler="avg")
    reference = BertModel.from_pretrained(tmp_path, dtype=torch.float32)  # the stored values, widened
    batch = tokenizer(["a man plays a guitar"], return_tensors="pt")
    with torch.no_grad():
        states = reference(**batch).last_hidden_state
    expected = (states * batch["attention_mask"][..., None]).sum(1) / batch["attention_mask"].sum()
    np.testing.assert_allclose(embed(["a man plays a guitar"]), expected.numpy(), atol=1e-5)


def test_backbone_load_drops_pretraining_heads_quietly_and_reports_missing_weights(tmp_path, caplog, capfd):
    """A pretraining checkpoint's heads (BERT's pooler and cls.*) are dropped without transformers' load report; a
    weight the checkpoint lacks is still reported, as one warning naming it."""
    import logging

    from safetensors.torch import load_file, save_file
    from transformers import BertForPreTraining

    from csekit.modeling.modeling_encoder import build_encoder

    BertForPreTraining(tiny_bert_config()).save_pretrained(tmp_path / "full")
    with caplog.at_level(logging.WARNING):
        build_encoder(None, str(tmp_path / "full"))
    assert "LOAD REPORT" not in capfd.readouterr().err and not caplog.records
    weights = load_file(tmp_path / "full" / "model.safetensors")
    del weights["bert.encoder.layer.1.output.dense.weight"]
    save_file(weights, tmp_path / "full" / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level(logging.WARNING):
        build_encoder(None, str(tmp_path / "full"))
    assert [record.getMessage().split(": ", 1)[1] for record in caplog.records] == [
        "1 missing (newly initialised) weight(s) while loading the backbone: encoder.layer.1.output.dense.weight"]
