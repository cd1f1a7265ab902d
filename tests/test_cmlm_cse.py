"""CMLM-CSE: frozen extractor, masked-only conditional MLM, the pretrained MLM head, L_MLM reaching the encoder only
through h, the next-layers fusioner equal to BertForMaskedLM, the masking statistics, lambda = 0 equals SimCSE,
publishing without the auxiliary network, layer validation, the contrastive-side augmentations."""

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassError
from transformers import AutoModel, BertForMaskedLM, BertModel, RobertaForMaskedLM, TrainingArguments

from conftest import load_weights, loss_settings, run_isolated_python, tiny_bert_config, tiny_roberta_config
from csekit.modeling import CMLMCSEConfig, CMLMCSEForPreTraining, CMLMCSEModel, SimCSEConfig, SimCSEModel
from csekit.trainers.augmentations import contrastive_augmentation
from csekit.trainers.cmlm_cse import CMLMCSECollator, CMLMCSETrainer
from csekit.trainers.simcse import SimCSETrainer

SENTENCES = [f"sentence number {i} about a {animal} that {verb} in the garden today ." for i, (animal, verb) in
             enumerate([(a, v) for a in ("dog", "cat", "horse", "bird") for v in ("runs", "sleeps", "eats", "jumps")])]


def tiny_config(layers=3, initializer_range=0.02, **config_kwargs) -> CMLMCSEConfig:
    """``initializer_range`` well above BERT's 0.02 gives O(1) logits, so a loss reacts to every input it has."""
    values = dict(pooler_type="avg", extractor_layers=1, fusion_layers=2, mask_rate=0.3)
    values.update(config_kwargs)
    encoder = tiny_bert_config(num_hidden_layers=layers, initializer_range=initializer_range)
    return CMLMCSEConfig(encoder_config=encoder.to_dict(), **values)


def tiny_model(tokenizer, layers=3, **config_kwargs) -> CMLMCSEForPreTraining:
    model = CMLMCSEForPreTraining(tiny_config(layers, **config_kwargs))
    model.tokenizer = tokenizer
    return model


def batch_for(tokenizer, sentences=SENTENCES[:8], config=None, **collator_kwargs) -> dict:
    collator = CMLMCSECollator(tokenizer, max_length=24, config=config or tiny_config(), **collator_kwargs)
    return collator([{"sent0": s} for s in sentences])


def trainer_for(model, tokenizer, tmp_path, trainer_class=CMLMCSETrainer, **args):
    values = dict(output_dir=str(tmp_path), report_to="none", remove_unused_columns=False, use_cpu=True,
                  per_device_train_batch_size=8, learning_rate=1e-3, logging_steps=1, save_strategy="no")
    values.update(args)
    return trainer_class(
        model=model,
        args=TrainingArguments(**values),
        train_dataset=Dataset.from_dict({"sent0": SENTENCES}),
        data_collator=CMLMCSECollator(tokenizer, max_length=24, config=model.config if isinstance(
            model.config, CMLMCSEConfig) else tiny_config()),
        processing_class=tokenizer,
    )


# ------------------------------------------------------------------------------------------------ the collator
def test_masking_statistics_at_the_configs_mask_rate(tokenizer):
    """The rate is the config's; selected share, 80/10/10, specials/padding never, view 0 intact."""
    sentences = [f"{s} {' and more' * (i % 5)}" for i, s in enumerate(SENTENCES * 100)]  # 1600, padded batch
    batch = batch_for(tokenizer, sentences, config=tiny_config(mask_rate=0.4))  # not the 0.15 default
    tokens = tokenizer(sentences, padding=True, truncation=True, max_length=24, return_tensors="pt")
    original, masked, labels = batch["input_ids"][:, 0], batch["mlm_input_ids"], batch["mlm_labels"]
    assert torch.equal(original, tokens["input_ids"])  # view 0, the contrastive input, is untouched
    assert torch.equal(batch["input_ids"][:, 1], original)
    selected = labels != -100
    special = torch.isin(original, torch.tensor(tokenizer.all_special_ids)) | (tokens["attention_mask"] == 0)
    assert not (selected & special).any() and (tokens["attention_mask"] == 0).any()  # [CLS], [SEP], [PAD] never
    assert abs(selected.sum() / (~special).sum() - 0.4) < 0.02
    assert torch.equal(labels[selected], original[selected])
    assert torch.equal(masked[~selected], original[~selected])  # only selected tokens may change
    as_mask = (masked[selected] == tokenizer.mask_token_id).float().mean()
    kept = (masked[selected] == original[selected]).float().mean()
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - 0.1) < 0.02 and abs(1 - as_mask - kept - 0.1) < 0.02


def test_masks_derive_from_seed_epoch_and_example_alone(tokenizer):
    """Each sentence's masks come from a generator of its own (seed, epoch, example index): the same in any batch,
    padded or packed, whatever the global random state; fresh in the next epoch and under another seed."""
    from types import SimpleNamespace

    from csekit.trainers.trainer import CollatorEpoch

    features = [{"sent0": sentence, "example_index": index} for index, sentence in enumerate(SENTENCES[:8])]

    def masks(collator, rows):
        batch = collator(rows)
        labels = batch["mlm_labels"]
        if collator.padding_free:
            return [row.tolist() for row in labels[0].split(batch["sequence_lengths"][:, 0].tolist())]
        return [row[mask.bool()].tolist() for row, mask in zip(labels, batch["attention_mask"][:, 0])]

    collator = CMLMCSECollator(tokenizer, max_length=24, config=tiny_config())
    torch.manual_seed(1)
    reference = masks(collator, features)
    torch.manual_seed(2)  # another global state, another batch composition and order, packed
    packed = CMLMCSECollator(tokenizer, max_length=24, config=tiny_config(), padding_free=True)
    assert masks(packed, features[::-1][:5]) == reference[::-1][:5]
    assert any(-100 != label for row in reference for label in row)
    CollatorEpoch(collator).on_epoch_begin(None, SimpleNamespace(epoch=1.5), None)  # resumed mid-epoch 1
    assert collator.draws.epoch == 1 and masks(collator, features) != reference
    collator.draws.epoch, collator.draws.seed = 0, 7
    assert masks(collator, features) != reference


def test_recipe_collator_takes_the_mask_rate_from_the_model_config(tokenizer, capsys):
    from csekit.recipes.cmlm_cse import RECIPE, AugmentationArguments

    with pytest.raises(SystemExit) as exit_info:
        RECIPE.parse(["--help"])  # every flag's help (the config docstring) formats: argparse expands % in it
    assert exit_info.value.code == 0 and "--fusion_init" in capsys.readouterr().out
    model_args, data_args, _, _ = RECIPE.parse(["--mask_rate", "0.4"])
    model = tiny_model(tokenizer, mask_rate=model_args.mask_rate)
    collator = RECIPE.collator(tokenizer, model, data_args, AugmentationArguments())
    assert collator.config is model.config and collator.config.mask_rate == 0.4
    assert "mask_rate" not in {f.name for f in dataclasses.fields(CMLMCSECollator)}  # one source: the config


def test_augmentations_touch_only_the_positive_view(tokenizer):
    batch = batch_for(tokenizer, augment=contrastive_augmentation("word_repetition"))
    view0 = tokenizer(SENTENCES[:8], padding=True, truncation=True, max_length=24, return_tensors="pt")["input_ids"]
    assert torch.equal(batch["input_ids"][:, 0, : view0.shape[1]], view0)
    assert (batch["attention_mask"][:, 1].sum(1) > batch["attention_mask"][:, 0].sum(1)).all()


# ------------------------------------------------------------------------------------------------- the loss
def direct_mlm_loss(model, batch: dict, out) -> torch.Tensor:
    """L_MLM by its formula, in the model's dtype: full-sequence logits, cross-entropy over the labelled (masked)
    positions only."""
    aux, mask = model.auxiliary, batch["attention_mask"][:, 0]
    dtype = out.embeddings.dtype
    with torch.no_grad():
        lexical = aux.extractor(input_ids=batch["mlm_input_ids"], attention_mask=mask).last_hidden_state
        states = torch.cat([out.embeddings[:, 0:1], lexical[:, 1:]], dim=1)
        extended = (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        for layer in aux.fusioner:
            states = layer(states, extended)
        head = aux.head  # BERT's prediction head: dense, GELU, LayerNorm, then the frozen pretrained word embeddings
        states = F.layer_norm(F.gelu(states @ head.dense.weight.T + head.dense.bias), (32,), head.LayerNorm.weight,
                              head.LayerNorm.bias, eps=1e-12)
        logits = states @ aux.extractor.embeddings.word_embeddings.weight.T + head.bias
        return F.cross_entropy(logits.flatten(0, 1), batch["mlm_labels"].flatten(), ignore_index=-100)


def test_mlm_loss_is_cross_entropy_on_masked_positions_only(tokenizer):
    model = tiny_model(tokenizer, initializer_range=0.5).eval()
    batch = batch_for(tokenizer)
    out = model(**batch)
    torch.testing.assert_close(out.mlm_loss, direct_mlm_loss(model, batch, out), rtol=1e-5, atol=1e-5)


def test_mlm_loss_is_computed_in_the_models_dtype_in_float64(tokenizer):
    """A float64 model's L_MLM stays float64 (so a float64 cached step is exact to float64 rounding), and equals the
    direct formula of the test above computed in float64 to 1e-12."""
    model = tiny_model(tokenizer, initializer_range=0.5).eval().double()
    batch = batch_for(tokenizer)
    out = model(**batch)
    assert out.mlm_loss.dtype == torch.float64
    torch.testing.assert_close(out.mlm_loss, direct_mlm_loss(model, batch, out), rtol=1e-12, atol=1e-12)


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
    loss = model.auxiliary(h, batch["mlm_input_ids"], batch["attention_mask"][:, 0], batch["mlm_labels"])
    (grad,) = torch.autograd.grad(loss, h)
    assert grad.abs().sum() > 0


def test_mlm_loss_reaches_the_encoder_only_through_h(tokenizer):
    """The vocabulary projection is the frozen extractor's, so with h detached L_MLM gives every
    encoder parameter (word embeddings included) exactly zero gradient; through h it reaches the encoder layers."""
    model = tiny_model(tokenizer, pooler_type="cls").train()  # MLP head in training: h = MLP([CLS])
    batch = batch_for(tokenizer)
    encoder = [(name, p) for name, p in model.named_parameters() if not name.startswith("auxiliary.")]
    assert any("word_embeddings" in name for name, _ in encoder)

    def mlm_gradients(detach_h: bool) -> dict:
        if detach_h:  # the sentence head's output is h; detaching it leaves only other paths into the encoder
            model.head = lambda pooled: CMLMCSEModel.head(model, pooled).detach()
        try:
            loss = model(**batch).mlm_loss
        finally:
            vars(model).pop("head", None)
        gradients = torch.autograd.grad(loss, [p for _, p in encoder], allow_unused=True)
        return {name: torch.zeros_like(p) if g is None else g for (name, p), g in zip(encoder, gradients)}

    for name, gradient in mlm_gradients(detach_h=True).items():
        assert not gradient.any(), name
    through_h = mlm_gradients(detach_h=False)
    assert through_h["encoder.encoder.layer.0.attention.self.query.weight"].abs().sum() > 0
    assert through_h["encoder.embeddings.word_embeddings.weight"].abs().sum() > 0  # via h's tokens only
    optimized = {id(p) for p in model.parameters() if p.requires_grad}
    assert id(model.auxiliary.extractor.embeddings.word_embeddings.weight) not in optimized


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


@pytest.mark.parametrize("settings", loss_settings("cmlm_cse"))
def test_trainer_loss_is_the_weighted_sum_of_the_papers_two_terms(tokenizer, tmp_path, settings):
    """L = contrastive_weight * L_contrast (eq. 1 of SimCSE on the two views, at the config's temperature) +
    mlm_weight * L_MLM (the model's conditional MLM loss), each term logged."""
    model = tiny_model(tokenizer, **{"mlm_weight": 0.5, **settings})
    trainer = trainer_for(model, tokenizer, tmp_path)
    outputs = model(**batch_for(tokenizer, config=model.config))
    losses = trainer.compute_losses(model, outputs, None)
    assert set(losses) == {"loss", "contrastive", "mlm"}
    views = outputs.embeddings.double()
    cosines = F.cosine_similarity(views[:, None, 0], views[None, :, 1], dim=-1) / model.config.temperature
    contrastive = F.cross_entropy(cosines, torch.arange(len(views)))
    config = model.config
    torch.testing.assert_close(losses["contrastive"].double(), contrastive)
    torch.testing.assert_close(losses["loss"].double(), config.contrastive_weight * contrastive
                               + config.mlm_weight * outputs.mlm_loss.double())


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
    source = tiny_model(tokenizer, layers=5).sentence_encoder()
    source.encoder.save_pretrained(tmp_path)
    model = CMLMCSEForPreTraining.from_encoder(str(tmp_path), pooler_type="avg", extractor_layers=2, fusion_layers=2)
    encoder_layers, aux = model.encoder.encoder.layer, model.auxiliary
    assert model.config.fusion_init == "next_layers" and len(aux.extractor.encoder.layer) == 2
    for extracted, original in zip(aux.extractor.encoder.layer, encoder_layers[:2]):
        assert all(torch.equal(a, b) for a, b in zip(extracted.state_dict().values(), original.state_dict().values()))

    def same_blocks(fusioner, blocks):
        return all(torch.equal(a, b) for fused, block in zip(fusioner, blocks, strict=True)
                   for a, b in zip(fused.state_dict().values(), block.state_dict().values()))

    assert same_blocks(aux.fusioner, encoder_layers[2:4])  # next_layers: blocks K .. K+F-1
    assert not same_blocks(aux.fusioner, encoder_layers[3:5])
    assert aux.fusioner[0].attention.self.query.weight is not encoder_layers[2].attention.self.query.weight
    top = CMLMCSEForPreTraining.from_encoder(str(tmp_path), pooler_type="avg", extractor_layers=2, fusion_layers=2,
                                             fusion_init="top_layers")
    assert same_blocks(top.auxiliary.fusioner, encoder_layers[3:5])
    random_init = CMLMCSEForPreTraining.from_encoder(str(tmp_path), pooler_type="avg", extractor_layers=3,
                                                     fusion_layers=6, fusion_init="random")
    assert len(random_init.auxiliary.fusioner) == 6
    assert not torch.equal(random_init.auxiliary.fusioner[0].output.dense.weight, encoder_layers[0].output.dense.weight)


def masked_lm_folder(path, mlm):
    """Save ``mlm`` with a non-zero output bias (the class initialises it to zeros, which a fresh head also has)."""
    head_bias = mlm.cls.predictions.bias if hasattr(mlm, "cls") else mlm.lm_head.bias
    with torch.no_grad():
        head_bias.normal_()
    mlm.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_pretrained_mlm_head_is_the_checkpoints(family, tokenizer, tmp_path, caplog):
    """The auxiliary head is the checkpoint's MLM head (BERT's cls.predictions, RoBERTa's lm_head,
    each with its own activation); its logits on any states equal the transformers head's."""
    if family == "bert":
        mlm = BertForMaskedLM(tiny_bert_config(num_hidden_layers=2, hidden_act="relu", initializer_range=0.5))
        reference = lambda states: mlm.cls(states)  # noqa: E731
    else:
        mlm = RobertaForMaskedLM(tiny_roberta_config(num_hidden_layers=2, initializer_range=0.5))
        reference = lambda states: mlm.lm_head(states)  # noqa: E731
    path = masked_lm_folder(tmp_path, mlm)
    with caplog.at_level("INFO"):
        model = CMLMCSEForPreTraining.from_encoder(path, pooler_type="avg", extractor_layers=1, fusion_layers=1)
    assert "the auxiliary MLM head is the pretrained head" in caplog.text
    states = torch.randn(5, 32)
    word_embeddings = model.auxiliary.extractor.get_input_embeddings().weight
    with torch.no_grad():
        torch.testing.assert_close(model.auxiliary.head(states, word_embeddings), reference(states))


def test_backbone_without_mlm_head_starts_fresh_and_says_so(tokenizer, tmp_path, caplog):
    BertModel(tiny_bert_config(), add_pooling_layer=False).save_pretrained(tmp_path)  # like the embedded MiniLM
    with caplog.at_level("WARNING"):
        model = CMLMCSEForPreTraining.from_encoder(str(tmp_path), pooler_type="avg", extractor_layers=1,
                                                   fusion_layers=1)
    assert f"no MLM head in {tmp_path}: the auxiliary head starts fresh" in caplog.text
    assert not model.auxiliary.head.bias.any() and torch.equal(model.auxiliary.head.LayerNorm.weight, torch.ones(32))


def test_next_layers_auxiliary_loss_equals_bert_for_masked_lm(tokenizer, tmp_path):
    """With K + F = all layers, the contiguous fusioner, the pretrained head and h := the encoder's
    own [CLS] state after block K, the conditional-MLM loss is BertForMaskedLM's loss on the same masked input."""
    mlm = BertForMaskedLM(tiny_bert_config(num_hidden_layers=4, initializer_range=0.5)).eval()
    path = masked_lm_folder(tmp_path, mlm)
    model = CMLMCSEForPreTraining.from_encoder(path, pooler_type="cls", extractor_layers=2, fusion_layers=2,
                                               fusion_init="next_layers", mask_rate=0.3).eval()
    batch = batch_for(tokenizer, SENTENCES, config=model.config)
    masked, mask, labels = batch["mlm_input_ids"], batch["attention_mask"][:, 0], batch["mlm_labels"]
    with torch.no_grad():
        h = model.encoder(input_ids=masked, attention_mask=mask, output_hidden_states=True).hidden_states[2][:, 0]
        loss = model.auxiliary(h, masked, mask, labels)
        expected = mlm(input_ids=masked, attention_mask=mask, labels=labels).loss
    assert (labels != -100).sum() > 20
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------- publish and resume
def test_published_model_has_no_auxiliary_weights_and_round_trips(tokenizer, tmp_path):
    model = tiny_model(tokenizer, pooler_type="cls", mlm_weight=1.0)
    trainer = trainer_for(model, tokenizer, tmp_path / "run", max_steps=1, save_strategy="steps", save_steps=1)
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    published_keys = set(load_weights(tmp_path / "final"))
    checkpoint_keys = set(load_weights(tmp_path / "run" / "checkpoint-1"))
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
    assert not any(p.requires_grad for p in restored.auxiliary.extractor.parameters())  # frozen again after loading
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
        (dict(extractor_layers=2), "fusion_layers=2 with fusion_init='next_layers' needs 4 pretrained blocks"),
        (dict(fusion_layers=4, fusion_init="top_layers"),
         "fusion_init='top_layers' needs 4 pretrained blocks, but the encoder has 3"),
        (dict(fusion_init="pretrained"), "fusion_init must be one of"),
        (dict(mask_rate=0.0), "mask_rate"),
        (dict(mlm_weight=-0.1), "loss weights must be >= 0"),
        (dict(mlm_weight=0.0, contrastive_weight=0.0), "nothing would be trained"),
    ],
)
def test_impossible_configurations_are_rejected(kwargs, message):
    values = dict(encoder_config=tiny_bert_config(num_hidden_layers=3).to_dict(), extractor_layers=1, fusion_layers=2)
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

    # recipes' main_guard prints this validator message as one line ("csekit: error: invalid model configuration: ...")
    with pytest.raises(StrictDataclassError, match="extractor_layers=6 is impossible for an encoder with 6 layers"):
        build("--extractor_layers", "6", "--fusion_layers", "2")
    model = build("--extractor_layers", "4", "--fusion_layers", "2")
    assert len(model.auxiliary.extractor.encoder.layer) == 4 and len(model.auxiliary.fusioner) == 2


@pytest.mark.parametrize("layers, extractor, fusion", [(12, 8, 3), (24, 8, 3), (6, 4, 2), (4, 3, 1), (2, 1, 1)])
def test_the_auxiliary_depths_default_to_the_papers_share_of_the_encoders_blocks(layers, extractor, fusion, caplog):
    """The paper's 8 + 3 blocks on BERT-base's 12 (and where they fit as they are); on a shallower encoder the same
    shares, 8/12 and 3/12 rounded half up (all-MiniLM-L6-v2's 6 blocks: 4 + 2), said in one log line; a value given
    stays."""
    import logging

    from transformers import BertConfig

    from csekit.modeling import CMLMCSEConfig

    encoder = BertConfig(num_hidden_layers=layers, hidden_size=32, num_attention_heads=2, intermediate_size=37)
    with caplog.at_level(logging.WARNING):
        config = CMLMCSEConfig(encoder_config=encoder.to_dict())
    assert (config.extractor_layers, config.fusion_layers) == (extractor, fusion)
    scaled = [record.getMessage() for record in caplog.records if "share of BERT-base" in record.getMessage()]
    assert scaled == ([] if layers >= 12 else [
        f"CMLM-CSE on a {layers}-block encoder: extractor_layers={extractor}, fusion_layers={fusion}, the paper's "
        "share of BERT-base's 12 blocks (extractor 8, fusioner 3)"])
    assert CMLMCSEConfig(encoder_config=encoder.to_dict(), extractor_layers=1).extractor_layers == 1
