"""CMLM-CSE: frozen extractor, masked-only conditional MLM, lambda = 0 equals SimCSE, publishing without the
auxiliary network, layer validation, the contrastive-side augmentations."""

import random

import numpy as np
import pytest
from huggingface_hub.errors import StrictDataclassError
import torch
import torch.nn.functional as F
from datasets import Dataset
from huggingface_hub.errors import StrictDataclassClassValidationError
from safetensors import safe_open
from transformers import AutoModel, TrainingArguments

from csekit.modeling import CMLMCSEConfig, CMLMCSEForPreTraining, CMLMCSEModel, SimCSEConfig, SimCSEModel
from tests.conftest import run_isolated_python, tiny_bert_config
from csekit.trainers.cmlm_cse import CMLMCSECollator, CMLMCSETrainer, DropOneWord, WordRepetition, contrastive_augmentation
from csekit.errors import DataError
from csekit.trainers.trainer import SimCSETrainer

SENTENCES = [f"sentence number {i} about a {animal} that {verb} in the garden today ." for i, (animal, verb) in
             enumerate([(a, v) for a in ("dog", "cat", "horse", "bird") for v in ("runs", "sleeps", "eats", "jumps")])]


def tiny_model(tokenizer, layers=3, **config_kwargs) -> CMLMCSEForPreTraining:
    values = dict(pooler_type="avg", extractor_layers=2, fusion_layers=2)
    values.update(config_kwargs)
    model = CMLMCSEForPreTraining(CMLMCSEConfig(encoder_config=tiny_bert_config(num_hidden_layers=layers).to_dict(),
                                                **values))
    model.tokenizer = tokenizer
    return model


def batch_for(tokenizer, sentences=SENTENCES[:8], mask_rate=0.3, **collator_kwargs) -> dict:
    collator = CMLMCSECollator(tokenizer, max_length=24, mask_rate=mask_rate, **collator_kwargs)
    return collator([{"sent0": s} for s in sentences])


def trainer_for(model, tokenizer, tmp_path, trainer_class=CMLMCSETrainer, **args):
    values = dict(output_dir=str(tmp_path), report_to="none", remove_unused_columns=False, use_cpu=True,
                  per_device_train_batch_size=8, learning_rate=1e-3, logging_steps=1, save_strategy="no")
    values.update(args)
    return trainer_class(
        model=model,
        args=TrainingArguments(**values),
        train_dataset=Dataset.from_dict({"sent0": SENTENCES}),
        data_collator=CMLMCSECollator(tokenizer, max_length=24, mask_rate=0.3),
        processing_class=tokenizer,
    )


# ------------------------------------------------------------------------------------------------ the collator
def test_collator_masks_only_real_tokens_of_view_zero(tokenizer):
    batch = batch_for(tokenizer, mask_rate=0.5)
    original = batch["input_ids"][:, 0]
    masked, labels = batch["mlm_input_ids"], batch["mlm_labels"]
    assert batch["input_ids"].shape[1] == 2 and masked.shape == labels.shape == original.shape
    selected = labels != -100
    special = torch.isin(original, torch.tensor(tokenizer.all_special_ids))
    assert selected.any() and not (selected & special).any()  # [CLS], [SEP], padding are never masked
    assert torch.equal(labels[selected], original[selected])
    assert torch.equal(masked[~selected], original[~selected])  # only selected tokens may change
    replaced = (masked == tokenizer.mask_token_id) & selected
    assert replaced.sum() > 0.5 * selected.sum()  # 80% [MASK], the rest random or kept
    assert torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])  # no augmentation: two identical views


def test_collator_rejects_bad_mask_rate(tokenizer):
    with pytest.raises(DataError, match="mask_rate"):
        CMLMCSECollator(tokenizer, mask_rate=1.0)


def test_augmentations_touch_only_the_positive_view(tokenizer):
    random.seed(0)
    words = "one two three four five six seven eight nine ten eleven twelve thirteen".split()
    repeated = WordRepetition(0.32)([" ".join(words)], 1)[0].split()
    assert len(repeated) == len(words) + round(0.32 * len(words))
    assert [w for i, w in enumerate(repeated) if i == 0 or repeated[i - 1] != w] == words  # in-place duplicates
    dropped = DropOneWord()([" ".join(words), "single"], 1)
    assert len(dropped[0].split()) == len(words) - 1 and set(dropped[0].split()) < set(words)
    assert dropped[1] == "single"
    batch = batch_for(tokenizer, augment=contrastive_augmentation("word_repetition"))
    view0 = tokenizer(SENTENCES[:8], padding=True, truncation=True, max_length=24, return_tensors="pt")["input_ids"]
    assert torch.equal(batch["input_ids"][:, 0, : view0.shape[1]], view0)
    assert (batch["attention_mask"][:, 1].sum(1) > batch["attention_mask"][:, 0].sum(1)).all()
    with pytest.raises(DataError, match="unknown contrastive augmentation"):
        contrastive_augmentation("shuffle")


# ------------------------------------------------------------------------------------------------- the loss
def test_mlm_loss_is_cross_entropy_on_masked_positions_only(tokenizer):
    model = tiny_model(tokenizer).eval()
    batch = batch_for(tokenizer)
    out = model(**batch)
    aux, mask = model.auxiliary, batch["attention_mask"][:, 0]
    # direct formula: full-sequence logits, cross-entropy over the labelled (masked) positions only
    with torch.no_grad():
        lexical = aux.extractor(input_ids=batch["mlm_input_ids"], attention_mask=mask).last_hidden_state
        states = torch.cat([out.embeddings[:, 0:1], lexical[:, 1:]], dim=1)
        extended = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in aux.fusioner:
            states = layer(states, extended)
        logits = aux.transform(states) @ model.encoder.embeddings.word_embeddings.weight.T + aux.output_bias
        expected = F.cross_entropy(logits.flatten(0, 1), batch["mlm_labels"].flatten(), ignore_index=-100)
    torch.testing.assert_close(out.mlm_loss, expected, rtol=1e-5, atol=1e-5)


def test_nothing_masked_gives_zero_loss_not_nan(tokenizer):
    model = tiny_model(tokenizer)
    batch = batch_for(tokenizer)
    batch["mlm_labels"][:] = -100
    loss = model(**batch).mlm_loss
    assert loss.item() == 0.0
    loss.backward()  # still differentiable (DDP needs every step to reach the auxiliary parameters)


def test_sentence_embedding_conditions_the_prediction(tokenizer):
    model = tiny_model(tokenizer).eval()
    batch = batch_for(tokenizer)
    h = torch.randn(8, 32, requires_grad=True)
    loss = model.auxiliary(h, batch["mlm_input_ids"], batch["attention_mask"][:, 0], batch["mlm_labels"],
                           model.encoder.embeddings.word_embeddings.weight)
    (grad,) = torch.autograd.grad(loss, h)
    assert grad.abs().sum() > 0
    # and through the full model the MLM loss reaches the encoder only via h and the tied word embeddings
    model.train()
    model(**batch).mlm_loss.backward()
    assert model.encoder.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


def test_lambda_zero_gradients_equal_simcse_exactly(tokenizer, tmp_path):
    cmlm = tiny_model(tokenizer, mlm_weight=0.0)
    simcse = SimCSEModel(SimCSEConfig(encoder_config=cmlm.config.encoder_config.to_dict(), pooler_type="avg"))
    simcse.load_state_dict(cmlm.sentence_encoder().state_dict())
    batch = batch_for(tokenizer)
    for model, trainer_class in ((cmlm, CMLMCSETrainer), (simcse, SimCSETrainer)):
        trainer = trainer_for(model, tokenizer, tmp_path, trainer_class)
        inputs = batch if model is cmlm else {k: v for k, v in batch.items() if not k.startswith("mlm_")}
        torch.manual_seed(123)  # same dropout masks in the shared encoder
        trainer.compute_loss(model.train(), inputs).backward()
    cmlm_grads = dict(cmlm.encoder.named_parameters())
    for name, parameter in simcse.encoder.named_parameters():
        assert torch.equal(cmlm_grads[name].grad, parameter.grad), name


def test_trainer_logs_both_components(tokenizer, tmp_path):
    model = tiny_model(tokenizer, mlm_weight=0.5)
    trainer = trainer_for(model, tokenizer, tmp_path)
    losses = trainer.compute_losses(model, model(**batch_for(tokenizer)), None)
    assert set(losses) == {"loss", "contrastive", "mlm"}
    torch.testing.assert_close(losses["loss"], losses["contrastive"] + 0.5 * losses["mlm"])


# ------------------------------------------------------------------------------------- frozen extractor, training
def test_extractor_frozen_and_bit_identical_through_training(tokenizer, tmp_path):
    model = tiny_model(tokenizer, mlm_weight=1.0)
    extractor_before = {k: v.clone() for k, v in model.auxiliary.extractor.state_dict().items()}
    encoder_before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    trainer = trainer_for(model, tokenizer, tmp_path, max_steps=2, weight_decay=0.1)
    trainer.train()
    assert not model.auxiliary.extractor.training  # never dropout, even while the rest trains
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not any(id(p) in optimized for p in model.auxiliary.extractor.parameters())  # no optimizer state
    assert all(id(p) in optimized for p in model.auxiliary.fusioner.parameters())
    for name, value in model.auxiliary.extractor.state_dict().items():
        assert torch.equal(value, extractor_before[name]), name
    assert any(not torch.equal(v, encoder_before[k]) for k, v in model.encoder.state_dict().items())
    logged = [entry for entry in trainer.state.log_history if "loss_mlm" in entry]
    assert logged and all("loss_contrastive" in entry for entry in logged)


def test_auxiliary_network_starts_from_the_pretrained_encoder(tokenizer, tmp_path):
    source = tiny_model(tokenizer, layers=4).sentence_encoder()
    source.encoder.save_pretrained(tmp_path)
    model = CMLMCSEForPreTraining.from_encoder(str(tmp_path), pooler_type="avg", extractor_layers=3, fusion_layers=2)
    encoder_layers, aux = model.encoder.encoder.layer, model.auxiliary
    assert len(aux.extractor.encoder.layer) == 3
    for extracted, original in zip(aux.extractor.encoder.layer, encoder_layers[:3]):
        assert all(torch.equal(a, b) for a, b in zip(extracted.state_dict().values(), original.state_dict().values()))
    for fused, top in zip(aux.fusioner, encoder_layers[2:]):  # fusion_init="top_layers": blocks 3 and 4
        assert all(torch.equal(a, b) for a, b in zip(fused.state_dict().values(), top.state_dict().values()))
    assert aux.fusioner[0].attention.self.query.weight is not encoder_layers[2].attention.self.query.weight
    random_init = CMLMCSEForPreTraining.from_encoder(str(tmp_path), pooler_type="avg", extractor_layers=3,
                                                     fusion_layers=5, fusion_init="random")
    assert len(random_init.auxiliary.fusioner) == 5
    assert not torch.equal(random_init.auxiliary.fusioner[0].output.dense.weight, encoder_layers[0].output.dense.weight)


# ----------------------------------------------------------------------------------------- publish and resume
def test_published_model_has_no_auxiliary_weights_and_round_trips(tokenizer, tmp_path):
    model = tiny_model(tokenizer, pooler_type="cls", mlm_weight=1.0)
    trainer = trainer_for(model, tokenizer, tmp_path / "run", max_steps=1, save_strategy="steps", save_steps=1)
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    with safe_open(tmp_path / "final" / "model.safetensors", "pt") as f:
        published_keys = set(f.keys())
    with safe_open(tmp_path / "run" / "checkpoint-1" / "model.safetensors", "pt") as f:
        checkpoint_keys = set(f.keys())
    assert not any(key.startswith("auxiliary.") for key in published_keys)
    assert {k for k in checkpoint_keys if not k.startswith("auxiliary.")} == published_keys
    assert any(key.startswith("auxiliary.fusioner.") for key in checkpoint_keys)
    # same parameters as a SimCSE model of the same config: the inference cost is SimCSE's
    simcse = SimCSEModel(SimCSEConfig(encoder_config=model.config.encoder_config.to_dict(), pooler_type="cls"))
    assert set(simcse.state_dict()) == published_keys
    expected = model.eval().encode(SENTENCES[:3])
    loaded = AutoModel.from_pretrained(tmp_path / "final")
    assert type(loaded) is CMLMCSEModel
    np.testing.assert_allclose(loaded.encode(SENTENCES[:3]), expected, atol=1e-6)
    # the checkpoint restores the whole training model, auxiliary network included (what resume relies on)
    restored = CMLMCSEForPreTraining.from_pretrained(tmp_path / "run" / "checkpoint-1")
    for name, value in model.state_dict().items():
        assert torch.equal(restored.state_dict()[name], value), name
    np.save(tmp_path / "expected.npy", expected)
    code = (
        "import numpy as np\n"
        "from transformers import AutoModel, AutoTokenizer\n"
        f"path = {str(tmp_path / 'final')!r}\n"
        "model = AutoModel.from_pretrained(path, trust_remote_code=True).eval()\n"
        "tok = AutoTokenizer.from_pretrained(path)\n"
        f"batch = tok({SENTENCES[:3]!r}, padding=True, return_tensors='pt')\n"
        "vectors = model(**batch).embeddings.detach().numpy()\n"
        f"np.testing.assert_allclose(vectors, np.load({str(tmp_path / 'expected.npy')!r}), atol=1e-5)\n"
        "print(type(model).__name__)\n"
    )
    result = run_isolated_python(code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("CMLMCSEModel")


# -------------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(extractor_layers=3), "extractor_layers=3 is impossible for an encoder with 3 layers"),
        (dict(extractor_layers=0), "extractor_layers=0 is impossible"),
        (dict(fusion_layers=0), "fusion_layers must be >= 1"),
        (dict(fusion_layers=4), "fusion_layers=4 with fusion_init='top_layers'"),
        (dict(fusion_init="pretrained"), "fusion_init must be one of"),
        (dict(mask_rate=0.0), "mask_rate"),
        (dict(mlm_weight=-0.1), "loss weights must be >= 0"),
        (dict(mlm_weight=0.0, contrastive_weight=0.0), "nothing would be trained"),
    ],
)
def test_impossible_configurations_are_rejected(kwargs, message):
    values = dict(encoder_config=tiny_bert_config(num_hidden_layers=3).to_dict(), extractor_layers=2)
    values.update(kwargs)
    with pytest.raises(StrictDataclassClassValidationError, match=message):
        CMLMCSEConfig(**values)


def test_random_fusioner_may_be_deeper_than_the_encoder():
    config = CMLMCSEConfig(encoder_config=tiny_bert_config(num_hidden_layers=3).to_dict(), extractor_layers=2,
                           fusion_layers=4, fusion_init="random")
    assert len(CMLMCSEForPreTraining(config).auxiliary.fusioner) == 4


def test_recipe_rejects_minilm_layer_combinations(minilm_path):
    from csekit.recipes.cmlm_cse import RECIPE

    def build(*flags):
        model_args = RECIPE.parse(["--pooler_type", "avg", *flags])[0]
        return RECIPE.build_model(str(minilm_path), model_args)

    # recipes' main_guard prints this validator message as one line ("error: invalid model configuration: ...")
    with pytest.raises(StrictDataclassError, match="extractor_layers=6 is impossible for an encoder with 6 layers"):
        build("--extractor_layers", "6", "--fusion_layers", "2")
    model = build("--extractor_layers", "4", "--fusion_layers", "2")
    assert len(model.auxiliary.extractor.encoder.layer) == 4 and len(model.auxiliary.fusioner) == 2
