"""DiffCSE against its authors' code (voidism/DiffCSE): loss and gradients of ``diffcse/models.py`` ``cl_forward``
with the patched BERT's ``cls_input`` (float64, dropout off): the batch-normalised projection head, the generator's
argmax at every position, the discriminator conditioned on the sentence vector in place of its first embedding, the
replaced-token cross-entropy over every padded position; the masking of both views from per-example generators; the
published model without the training-only networks.

The authors' computations are written here from reading their files (never imported or copied)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from torch import nn
from transformers import BertForMaskedLM, TrainingArguments

from conftest import loss_settings, tiny_bert_config
from csekit.modeling import DiffCSEConfig, DiffCSEForPreTraining
from csekit.trainers.diffcse import DiffCSECollator, DiffCSETrainer
from csekit.trainers.randomness import ExampleDraws

SENTENCES = [f"sentence number {i} about a {animal} that {verb} in the garden today ." for i, (animal, verb) in
             enumerate([(a, v) for a in ("dog", "cat", "horse", "bird") for v in ("runs", "sleeps", "eats", "jumps")])]


def tiny_config(**kwargs) -> DiffCSEConfig:
    encoder = tiny_bert_config(initializer_range=0.2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    generator = tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_hidden_layers=1)
    values = {"pooler_type": "cls", "generator_config": generator.to_dict(), "lambda_weight": 0.5, **kwargs}
    return DiffCSEConfig(encoder_config=encoder.to_dict(), **values)


def batch_for(tokenizer, config, sentences=SENTENCES[:8]) -> dict:
    collator = DiffCSECollator(tokenizer, max_length=16, config=config, draws=ExampleDraws(seed=3))
    return collator([{"sent0": s, "example_index": i} for i, s in enumerate(sentences)])


# ------------------------------------------------------------------------------------------------ the masking
def test_both_views_are_masked_from_each_examples_generator_never_a_special_token(tokenizer):
    config = tiny_config(masking_ratio=0.3)
    batch = batch_for(tokenizer, config, SENTENCES)
    masked, original, mask = batch["mlm_input_ids"], batch["input_ids"], batch["attention_mask"].bool()
    changed = (masked != original) & mask
    special = torch.isin(original, torch.tensor(tokenizer.all_special_ids))
    assert not (changed & special).any() and torch.equal(masked[~mask], original[~mask])
    assert not torch.equal(changed[:, 0], changed[:, 1])  # each view has its own masks
    selectable = (mask & ~special).sum().item()
    assert 0.15 < (masked == tokenizer.mask_token_id).sum().item() / selectable < 0.35  # 0.3 x 0.8 selected
    again = batch_for(tokenizer, config, SENTENCES[4:6])  # the same examples, in another batch
    rows = DiffCSECollator(tokenizer, max_length=16, config=config, draws=ExampleDraws(seed=3))(
        [{"sent0": s, "example_index": i} for i, s in list(enumerate(SENTENCES))[4:6]])
    width = rows["mlm_input_ids"].shape[-1]
    assert torch.equal(rows["mlm_input_ids"], batch["mlm_input_ids"][4:6, :, :width])
    assert again is not None



def test_the_masking_step_is_the_one_cmlm_cse_takes(tokenizer):
    """One masking function for both methods: at the same rate and seed, a sentence's first view is masked exactly as
    CMLM-CSE's collator masks it."""
    from csekit.modeling import CMLMCSEConfig
    from csekit.trainers.cmlm_cse import CMLMCSECollator

    features = [{"sent0": s, "example_index": i} for i, s in enumerate(SENTENCES[:8])]
    diffcse = DiffCSECollator(tokenizer, max_length=16, config=tiny_config(masking_ratio=0.3),
                              draws=ExampleDraws(seed=3))(features)
    cmlm = CMLMCSECollator(tokenizer, max_length=16, config=CMLMCSEConfig(encoder_config=tiny_bert_config().to_dict(),
                                                                          mask_rate=0.3),
                           draws=ExampleDraws(seed=3))(features)
    assert torch.equal(diffcse["mlm_input_ids"][:, 0], cmlm["mlm_input_ids"])

# ------------------------------------------------------------------------------------------ loss and gradients
def authors_projection(model_mlp: nn.Module) -> nn.Sequential:
    """``ProjectionMLP`` of ``diffcse/models.py`` (``--batchnorm``), with the weights of ``model_mlp``."""
    hidden = model_mlp.net[0].in_features
    mlp = nn.Sequential(nn.Linear(hidden, hidden * 2, bias=False), nn.BatchNorm1d(hidden * 2), nn.ReLU(inplace=True),
                        nn.Linear(hidden * 2, hidden, bias=False), nn.BatchNorm1d(hidden, affine=False)).double()
    mlp.load_state_dict(model_mlp.net.state_dict())
    return mlp


def authors_loss(model, batch: dict, temp: float, lambda_weight: float, cls_token: int) -> dict:
    """``cl_forward`` (``before_mlp`` off, ``pooler_type cls``) with their BERT's ``cls_input`` patch, on the
    networks of ``model`` (the same weights): the encoder, the projection, the generator, the discriminator and
    ``electra_head``."""
    mlp = authors_projection(model.mlp)
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    batch_size, num_sent = input_ids.shape[:2]
    input_ids = input_ids.view((-1, input_ids.size(-1)))
    attention_mask = attention_mask.view((-1, attention_mask.size(-1)))
    outputs = model.encoder(input_ids, attention_mask=attention_mask)
    pooler_output = outputs.last_hidden_state[:, 0].view((batch_size, num_sent, -1))
    pooler_output = mlp(pooler_output.view((batch_size * num_sent, -1))).view((batch_size, num_sent, -1))
    mlm_input_ids = batch["mlm_input_ids"].view((-1, input_ids.size(-1)))
    with torch.no_grad():
        g_pred = model.generator(mlm_input_ids, attention_mask)[0].argmax(-1)
    g_pred[:, 0] = cls_token
    replaced = (g_pred != input_ids) * attention_mask
    e_inputs = g_pred * attention_mask
    # the patched BertModel.forward: embeddings, then cls_input in place of the first position, then the layers
    discriminator = model.discriminator
    embedding_output = discriminator.embeddings(input_ids=e_inputs)
    embedding_output = torch.cat([pooler_output.view((-1, pooler_output.size(-1))).unsqueeze(1),
                                  embedding_output[:, 1:, :]], dim=1)
    extended = (1.0 - attention_mask[:, None, None, :].double()) * torch.finfo(torch.float64).min
    hidden = discriminator.encoder(embedding_output, attention_mask=extended).last_hidden_state
    z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
    cos_sim = F.cosine_similarity(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1) / temp
    loss = F.cross_entropy(cos_sim, torch.arange(cos_sim.size(0)))
    prediction_scores = model.electra_head(hidden)
    masked_lm_loss = F.cross_entropy(prediction_scores.view(-1, 2), replaced.view(-1))
    return {"loss": loss + lambda_weight * masked_lm_loss, "rtd": masked_lm_loss, "replaced": replaced,
            "mlp": mlp}


def diffcse_model(tokenizer, **kwargs) -> DiffCSEForPreTraining:
    model = DiffCSEForPreTraining(tiny_config(**kwargs)).double()
    model.generator = BertForMaskedLM(tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                                       num_hidden_layers=1, initializer_range=0.5)).double()
    model.generator.requires_grad_(False)
    model.tokenizer = tokenizer
    return model.train()


def trainer_for(model, tokenizer, tmp_path) -> DiffCSETrainer:
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", remove_unused_columns=False, use_cpu=True,
                             per_device_train_batch_size=8, save_strategy="no")
    return DiffCSETrainer(model=model, args=args, train_dataset=Dataset.from_dict({"sent0": SENTENCES}),
                          data_collator=DiffCSECollator(tokenizer, max_length=16, config=model.config),
                          processing_class=tokenizer)


@pytest.mark.parametrize("settings", loss_settings("diffcse"))
def test_loss_and_gradients_equal_the_authors_code(tokenizer, tmp_path, settings):
    model = diffcse_model(tokenizer, **settings)
    varied = [" ".join(sentence.split()[: 3 + index]) for index, sentence in enumerate(SENTENCES[:8])]
    batch = batch_for(tokenizer, model.config, varied)
    assert not batch["attention_mask"].all()  # padding, which the authors' loss counts
    trainer = trainer_for(model, tokenizer, tmp_path)
    losses = trainer.compute_losses(model, model(**batch), batch)
    losses["loss"].backward()
    ours = {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.requires_grad}
    model.zero_grad()
    theirs = authors_loss(model, batch, temp=model.config.temperature, lambda_weight=model.config.lambda_weight,
                          cls_token=tokenizer.cls_token_id)
    replaced = theirs["replaced"]
    assert 0 < replaced.sum() < replaced.numel()  # the generator replaced some tokens and kept others
    torch.testing.assert_close(losses["rtd"], theirs["rtd"], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(losses["loss"], theirs["loss"], rtol=1e-10, atol=1e-12)
    theirs["loss"].backward()
    reference = dict(model.named_parameters())
    reference.update({f"mlp.net.{name}": parameter for name, parameter in theirs["mlp"].named_parameters()})
    for name, gradient in ours.items():
        assert gradient.abs().sum() > 0, name  # every trained network moves
        torch.testing.assert_close(gradient, reference[name].grad, rtol=1e-8, atol=1e-11,
                                   msg=lambda m, name=name: f"{name}: {m}")
    assert all(parameter.grad is None for parameter in model.generator.parameters())  # frozen


def test_the_discriminator_sees_the_sentence_vector(tokenizer):
    model = diffcse_model(tokenizer)
    batch = batch_for(tokenizer, model.config)
    first = model(**batch).rtd_loss.item()
    copied = copy.deepcopy(model)  # a copy conditions its discriminator on its own vectors, not the original's
    torch.testing.assert_close(copied(**batch).rtd_loss, model(**batch).rtd_loss)
    with torch.no_grad():
        model.encoder.embeddings.word_embeddings.weight.mul_(1.5)  # another sentence vector, the same tokens
        assert model(**batch).rtd_loss.item() != pytest.approx(first, rel=1e-6)
        copied.encoder.embeddings.word_embeddings.weight.mul_(1.5)
        torch.testing.assert_close(copied(**batch).rtd_loss, model(**batch).rtd_loss)


def test_the_published_model_has_no_training_only_networks(tokenizer, tmp_path):
    model = DiffCSEForPreTraining(tiny_config())
    published = model.sentence_encoder()
    training_only = ("generator.", "discriminator.", "electra_head.")
    assert not any(name.startswith(training_only) for name in published.state_dict())
    assert {n for n in model.state_dict() if not n.startswith(training_only)} == set(published.state_dict())
    assert any(name.startswith("mlp.net.1.running_mean") for name in published.state_dict())
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path / "checkpoint")
    restored = DiffCSEForPreTraining.from_pretrained(tmp_path / "checkpoint")
    assert not any(p.requires_grad for p in restored.generator.parameters())  # frozen again
    assert all(p.requires_grad for p in restored.discriminator.parameters())


def test_a_generator_with_another_vocabulary_is_refused(tokenizer, tmp_path):
    folder = tmp_path / "generator"
    BertForMaskedLM(tiny_bert_config(vocab_size=1000)).save_pretrained(folder)
    backbone = tmp_path / "backbone"
    BertForMaskedLM(tiny_bert_config()).bert.save_pretrained(backbone)
    with pytest.raises(ValueError, match="vocabulary has 1000 tokens"):
        DiffCSEForPreTraining.from_encoder(str(backbone), generator_name_or_path=str(folder))


def test_a_generator_that_is_not_there_is_one_line_before_any_work(tiny_backbone, corpus, tmp_path, capsys):
    from csekit import cli

    output = tmp_path / "out"
    argv = ["train", "diffcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus),
            "--output_dir", str(output), "--generator_name_or_path", str(tmp_path / "no-generator")]
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no-generator" in lines[0], lines
    assert not output.exists()


def generator_cases(tiny_backbone, saved_tiny_model, tokenizer, root) -> dict:
    """Folders that are not what DiffCSE's generator must be, each named by what the refusal says."""
    from transformers import BertTokenizerFast

    from conftest import masked_lm_beside

    cases = {"no weights for cls.predictions": tiny_backbone,  # an encoder: transformers would add a random head
             "a sentence-encoder folder": saved_tiny_model}
    other_size = root / "other-size"
    BertForMaskedLM(tiny_bert_config(vocab_size=1000)).save_pretrained(other_size)
    tokenizer.save_pretrained(other_size)
    cases["vocabulary differs"] = other_size
    shuffled = root / "same-size-other-vocabulary"  # the same number of tokens, two of them swapped
    masked_lm = masked_lm_beside(tiny_backbone)
    vocab = sorted(tokenizer.get_vocab(), key=tokenizer.get_vocab().get)
    vocab[1000], vocab[1001] = vocab[1001], vocab[1000]
    shuffled.mkdir()
    (shuffled / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(str(shuffled / "vocab.txt")).save_pretrained(shuffled)
    BertForMaskedLM.from_pretrained(masked_lm).save_pretrained(shuffled)
    cases["4 token-id pairs differ"] = shuffled
    return cases


def test_a_generator_without_what_diffcse_uses_is_one_line_before_any_work(tiny_backbone, saved_tiny_model,
                                                                           tokenizer, corpus, tmp_path, capsys):
    """The generator must be a masked LM whose head is in its folder (not an encoder given a random head), not a
    sentence-encoder folder, with the encoder's vocabulary token for token (same size is not enough): each is one
    line, exit 2, nothing written."""
    from csekit import cli

    cases = generator_cases(tiny_backbone, saved_tiny_model, tokenizer, tmp_path)
    capsys.readouterr()
    for reason, folder in cases.items():
        output = tmp_path / "out"
        argv = ["train", "diffcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus),
                "--output_dir", str(output), "--generator_name_or_path", str(folder)]
        assert cli.main(argv) == 2, reason
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and reason in lines[0] and "--generator_name_or_path" in lines[0], (reason, lines)
        assert not output.exists()
