"""LoRA through peft (``trainers/lora.py``, ``modeling/adapters.py``): the adapters and the method's head train, the
backbone's weights stay bit for bit, checkpoints resume the adapters exactly, and the published folder is the merged
plain model that sentence-transformers and ``AutoModel`` load without peft, encoding as the trained model did.

Oracles: peft itself (``get_peft_model`` with the trained adapters, then its own ``merge_and_unload``) for the
published weights; ``SentenceTransformer(folder)`` for the vectors; the backbone folder as loaded for the frozen
weights."""

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from conftest import save_tiny_backbone
from csekit import cli
from csekit.errors import DataError
from csekit.modeling import ESimCSEForPreTraining, SimCSEModel
from csekit.trainers import CSETrainingArguments, ESimCSETrainer, SimCSETrainer
from csekit.trainers.collators import enable_padding_free
from test_decoders import SENTENCES, decoders_dir  # noqa: F401  (the tiny decoders fixture)

peft = pytest.importorskip("peft", reason="LoRA needs peft: pip install 'csekit[peft]'")

ROWS = Dataset.from_dict({"sent0": [f"sentence {i} tells of the harbour {i * 7}" + " very" * (i % 5)
                                    for i in range(32)]})


def arguments(out, **overrides) -> CSETrainingArguments:
    settings = dict(output_dir=str(out), per_device_train_batch_size=8, max_steps=2, save_strategy="no",
                    eval_strategy="no", load_best_model_at_end=False, report_to="none", use_cpu=True,
                    learning_rate=1e-2, lora_r=4)
    return CSETrainingArguments(**{**settings, **overrides})


def trainer_on(folder, args, pooler="last_token", trainer_class=SimCSETrainer, model_class=SimCSEModel, **kwargs):
    torch.manual_seed(0)  # the head's first values (the adapters' follow args.seed)
    model = model_class.from_encoder(str(folder), pooler_type=pooler)
    return trainer_class(model=model, args=args, train_dataset=ROWS,
                         processing_class=AutoTokenizer.from_pretrained(folder), **kwargs)


def encoder_weights(folder) -> dict:
    """The backbone's weights of a saved folder, by the backbone's own names (the file keeps csekit's ``encoder.``)."""
    return {name.removeprefix("encoder."): value for name, value in
            load_file(folder / "encoder" / "model.safetensors").items()}


@pytest.mark.parametrize("backbone", ["qwen3", "bert"])
def test_only_the_adapters_and_the_head_train_and_the_folder_is_the_merged_model(
        backbone, decoders_dir, tiny_backbone, tmp_path):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    folder, pooler = (decoders_dir / "qwen3", "last_token") if backbone == "qwen3" else (tiny_backbone, "cls")
    kwargs = {} if backbone == "qwen3" else {"add_pooling_layer": False}  # csekit drops BERT's tanh pooler
    loaded = {name: value.clone() for name, value in AutoModel.from_pretrained(folder, **kwargs).state_dict().items()}
    trainer = trainer_on(folder, arguments(tmp_path / "run"), pooler)
    model = trainer.model
    head = {name: value.clone() for name, value in model.state_dict().items() if not name.startswith("encoder.")}
    trainer.train()
    trained = model.encoder.state_dict()
    frozen = {name.replace(".base_layer", ""): value for name, value in trained.items() if "lora_" not in name}
    assert frozen.keys() == loaded.keys()
    assert all(torch.equal(frozen[name], loaded[name]) for name in loaded)  # the backbone, bit for bit
    assert all(bool(value.abs().sum() > 0) for name, value in trained.items() if "lora_B" in name)  # from zero
    if head:  # BERT's cls pooler trains SimCSE's MLP beside the adapters
        assert all(not torch.equal(model.state_dict()[name], value) for name, value in head.items())
    trainer.save_model(str(tmp_path / "model"))
    saved = encoder_weights(tmp_path / "model")
    assert saved.keys() == loaded.keys()  # the backbone's own names: no adapter, no base_layer
    # peft's own merge of the same adapters on the loaded backbone
    oracle = peft.get_peft_model(AutoModel.from_pretrained(folder, **kwargs), trainer.peft_config)
    oracle.base_model.model.load_state_dict(trained)
    merged = oracle.merge_and_unload().state_dict()
    assert all(torch.allclose(saved[name], merged[name], atol=1e-7, rtol=0) for name in saved)
    assert any(not torch.equal(saved[name], loaded[name]) for name in saved)
    expected = model.encode(SENTENCES)  # the trained model, adapters unmerged
    assert np.abs(SentenceTransformer(str(tmp_path / "model"), device="cpu").encode(SENTENCES) - expected).max() \
        <= 1e-6
    assert np.abs(AutoModel.from_pretrained(tmp_path / "model").encode(SENTENCES) - expected).max() <= 1e-6
    record = json.loads((tmp_path / "model" / "training_args.json").read_text())
    assert record["lora"]["peft_config"]["r"] == 4 and record["training_args"]["lora_r"] == 4


def test_the_python_peft_config_trains_what_the_flags_train(decoders_dir, tmp_path):  # noqa: F811
    flags = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "flags"))
    flags.train()
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, target_modules="all-linear")
    python = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "python", lora_r=None), peft_config=config)
    python.train()
    ours, theirs = flags.model.state_dict(), python.model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in ours)
    with pytest.raises(DataError, match="peft_config and --lora_r 4: give the adapters' settings once"):
        trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "both"), peft_config=config)
    torch.manual_seed(123)  # whatever ran before: the adapters' first values are the run's seed's
    again = SimCSETrainer(model=SimCSEModel.from_encoder(str(decoders_dir / "qwen3"), pooler_type="last_token"),
                          args=arguments(tmp_path / "again"), train_dataset=ROWS,
                          processing_class=AutoTokenizer.from_pretrained(decoders_dir / "qwen3"))
    first = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "first")).model.state_dict()
    assert all(torch.equal(value, first[name]) for name, value in again.model.state_dict().items())


def test_a_resume_continues_the_adapters_exactly(decoders_dir, tmp_path):  # noqa: F811
    settings = dict(max_steps=4, save_strategy="steps", save_steps=2, lora_dropout=0.1)
    whole = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "whole", **settings))
    whole.train()
    killed = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "resumed", **settings))
    killed.train()
    for name in ("checkpoint-4",):  # as if killed after the checkpoint of step 2
        import shutil

        shutil.rmtree(tmp_path / "resumed" / name)
    checkpoint = encoder_weights(tmp_path / "resumed" / "checkpoint-2")
    assert any("lora_A" in name for name in checkpoint)  # the checkpoint holds the adapters
    resumed = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "resumed", **settings))
    resumed.train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-2"))
    ours, theirs = whole.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    other = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "resumed", **{**settings, "lora_r": 8}))
    with pytest.raises(DataError, match="lora_r"):  # other adapters than the checkpoint's
        other.train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-2"))


def test_gradient_checkpointing_trains_the_adapters_as_without_it(tiny_backbone, tmp_path):
    plain = trainer_on(tiny_backbone, arguments(tmp_path / "plain"), "cls")
    plain.train()
    checkpointed = trainer_on(tiny_backbone, arguments(tmp_path / "checkpointed", gradient_checkpointing=True), "cls")
    checkpointed.train()
    ours, theirs = plain.model.state_dict(), checkpointed.model.state_dict()
    assert all(torch.allclose(ours[name], theirs[name], atol=1e-6, rtol=0) for name in ours)


@pytest.mark.parametrize("way", ["gradient caching", "packed batches"])
def test_adapters_train_exactly_under_gradient_caching_and_packing(way, tokenizer, tmp_path):
    tiny_backbone = save_tiny_backbone(tmp_path / "backbone", tokenizer, dropout=0.0)  # the same batches' outputs
    exact = dict(lora_dropout=0.0, optim="sgd")  # (Adam's first steps turn rounding into +-lr)
    plain = trainer_on(tiny_backbone, arguments(tmp_path / "plain", **exact), "cls")
    plain.train()
    if way == "gradient caching":
        other = trainer_on(tiny_backbone, arguments(tmp_path / "other", mini_batch_size=3, **exact), "cls")
    else:
        torch.manual_seed(0)
        model = SimCSEModel.from_encoder(str(tiny_backbone), pooler_type="cls")
        tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
        assert enable_padding_free(model, tokenizer, 32)
        other = SimCSETrainer(model=model, args=arguments(tmp_path / "other", **exact), train_dataset=ROWS,
                              processing_class=tokenizer, data_collator=SimCSETrainer.default_collator(
                                  tokenizer, model, padding_free=True))
    other.train()
    ours, theirs = plain.model.state_dict(), other.model.state_dict()
    assert all(torch.allclose(ours[name], theirs[name], atol=1e-6, rtol=0) for name in ours)
    assert any(not torch.equal(ours[name], value) for name, value in trainer_on(
        tiny_backbone, arguments(tmp_path / "untrained", **exact), "cls").model.state_dict().items())


# ------------------------------------------------------------------------------------------------ refused, one line
def test_what_lora_cannot_train_is_refused_in_one_line(decoders_dir, tiny_backbone, tmp_path, monkeypatch):  # noqa: F811
    qwen = decoders_dir / "qwen3"
    with pytest.raises(DataError, match=r"--lora_target_modules query: qwen3 has no such layer; its linear layers are "
                                        r"down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"):
        trainer_on(qwen, arguments(tmp_path / "a", lora_target_modules=["q_proj", "query"]))
    with pytest.raises(DataError, match="LoRA .--lora_r / peft_config.: esimcse keeps a momentum copy"):
        trainer_on(tiny_backbone, arguments(tmp_path / "b"), "cls", ESimCSETrainer, ESimCSEForPreTraining)
    dora = peft.LoraConfig(r=4, target_modules=["q_proj"], use_dora=True)
    with pytest.raises(DataError, match="peft_config: use_dora=True; csekit trains plain LoRA"):
        trainer_on(qwen, arguments(tmp_path / "c", lora_r=None), peft_config=dora)
    with pytest.raises(DataError, match="--lora_alpha 16: set --lora_r too"):
        trainer_on(qwen, arguments(tmp_path / "d", lora_r=None, lora_alpha=16))
    with pytest.raises(DataError, match="--lora_dropout 1: must be in"):
        trainer_on(qwen, arguments(tmp_path / "e", lora_dropout=1.0))
    monkeypatch.setitem(__import__("sys").modules, "peft", None)  # as without peft installed
    with pytest.raises(DataError, match=r"LoRA needs peft, which is not installed: pip install 'csekit\[peft\]'"):
        trainer_on(qwen, arguments(tmp_path / "f"))


# ------------------------------------------------------------------------------------------------ the command line
def test_the_command_line_trains_a_decoder_with_lora_and_publishes_it_merged(decoders_dir, corpus, tmp_path, capsys):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    flags = ["--model_name_or_path", str(decoders_dir / "qwen3"), "--pooler_type", "last_token", "--train_file",
             str(corpus), "--per_device_train_batch_size", "8", "--max_steps", "2", "--save_strategy", "no",
             "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_seq_length", "16",
             "--do_test_eval", "false", "--lora_r", "8"]
    assert cli.main(["train", "simcse", *flags, "--output_dir", str(out)]) == 0
    expected = AutoModel.from_pretrained(out).encode(SENTENCES)
    assert np.abs(SentenceTransformer(str(out), device="cpu").encode(SENTENCES) - expected).max() <= 1e-6
    assert not any("lora_" in name for name in encoder_weights(out))
    for method, extra, line in (
            ("simcse", ["--lora_target_modules", "query"], "qwen3 has no such layer; its linear layers are"),
            ("esimcse", [], "esimcse keeps a momentum copy of the whole encoder")):
        refused = tmp_path / method
        assert cli.main(["train", method, *flags, *extra, "--output_dir", str(refused)]) == 2
        assert line in capsys.readouterr().err and not refused.exists()


def test_a_lora_step_equals_sentence_transformers_mnrl_with_the_same_adapters(decoders_dir, tmp_path):  # noqa: F811
    """Oracle: sentence-transformers' own MultipleNegativesRankingLoss (scale 1 / temperature) on its own
    ``SentenceTransformer`` of the same decoder, with the same adapters added through transformers' peft integration,
    in float64 and without dropout: unsupervised SimCSE's loss and the adapters' gradients are the same numbers."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    folder = decoders_dir / "qwen3"
    trainer = trainer_on(folder, arguments(tmp_path / "run", lora_dropout=0.0))
    model = trainer.model.double()
    with torch.no_grad():  # adapters away from zero, so their gradients and the merged weights both matter
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    sentences = [f"sentence {i} tells of the harbour {i * 7}" + " very" * (i % 3) for i in range(6)]
    loss = trainer.compute_loss(model.train(), trainer.data_collator([{"sent0": text} for text in sentences]))
    loss.backward()
    ours = {name.removeprefix("encoder."): parameter.grad for name, parameter in model.named_parameters()
            if "lora_" in name}

    # the saved folder gives the oracle its tokenizer and pooling; its (merged) weights are replaced by the base ones
    model.save_pretrained(tmp_path / "plain")
    base = SentenceTransformer(str(tmp_path / "plain"), device="cpu").double()
    transformer = base[0].auto_model
    transformer.load_state_dict({name.removeprefix("encoder.").replace(".base_layer", ""): value
                                 for name, value in model.state_dict().items() if "lora_" not in name
                                 and name.startswith("encoder.")})
    transformer.add_adapter(trainer.peft_config)
    transformer.double().load_state_dict({name.removeprefix("encoder."): value
                                          for name, value in model.state_dict().items()
                                          if name.startswith("encoder.")})
    base.train()
    features = [base.tokenize(sentences), base.tokenize(sentences)]
    theirs = MultipleNegativesRankingLoss(base, scale=1 / model.config.temperature)(features, None)
    theirs.backward()
    assert abs(float(loss) - float(theirs)) <= 1e-10
    for name, parameter in transformer.named_parameters():
        if "lora_" in name:
            assert torch.allclose(parameter.grad, ours[name], atol=1e-10, rtol=1e-8), name


def test_adapters_train_under_bf16_autocast_over_float32_weights(decoders_dir, tmp_path):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    trainer = trainer_on(decoders_dir / "qwen3", arguments(tmp_path / "run", bf16=True))
    before = {name: value.clone() for name, value in trainer.model.state_dict().items()}
    trainer.train()
    after = trainer.model.state_dict()
    assert all(value.dtype == torch.float32 for value in after.values())
    assert all(torch.equal(after[name], value) == ("lora_" not in name) for name, value in before.items()
               if name.startswith("encoder."))  # the adapters moved, nothing else of the backbone
    trainer.save_model(str(tmp_path / "model"))
    expected = trainer.model.encode(SENTENCES)  # in float32 after training, as the folder loads
    assert np.abs(SentenceTransformer(str(tmp_path / "model"), device="cpu").encode(SENTENCES) - expected).max() \
        <= 1e-6
    assert np.abs(AutoModel.from_pretrained(tmp_path / "model").encode(SENTENCES) - expected).max() <= 1e-6
