"""ESimCSE against its authors' code (caskcsg/sentemb ``ESimCSE/``): the subword and word repetition rules of
``train.py``, and loss, gradients, momentum encoder and queue of ``esimcse/models.py`` ``cl_forward`` with
``esimcse/trainers.py`` ``compute_loss`` over several steps and an epoch boundary (float64, dropout off); the keys'
network, Matryoshka terms over the queue, and the published model without the momentum encoder.

The authors' computations are written here from reading their files (never imported or copied)."""

import copy
import random

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import BertModel, TrainerCallback, TrainingArguments

from conftest import loss_settings, tiny_bert_config
from csekit.modeling import ESimCSEConfig, ESimCSEForPreTraining
from csekit.modeling.momentum import MomentumEncoder
from csekit.trainers.esimcse import ESimCSECollator, ESimCSETrainer, repeat_subwords, repeat_words
from csekit.trainers.randomness import ExampleDraws

SENTENCES = [f"sentence number {i} about a {animal} that {verb} in the garden today ." for i, (animal, verb) in
             enumerate([(a, v) for a in ("dog", "cat", "horse", "bird") for v in ("runs", "sleeps", "eats", "jumps")])]


# ------------------------------------------------------------------------------------------------ the repetition
def authors_bpe_repetition(input_ids: list, dup_rate: float, rng: random.Random) -> list:
    """``train.py`` ``prepare_features``, ``dup_type == "bpe"``, for a row of the second column (their global
    ``random`` is ``rng``)."""
    input_len = len(input_ids)
    if int(dup_rate * input_len) > 0:
        add_len = rng.randrange(min(10, int(dup_rate * input_len)))
        dup = sorted(rng.sample(range(1, input_len - 1), add_len))
        new_input_ids = []
        for i, _id in enumerate(input_ids):
            if i in dup:
                new_input_ids.append(_id)
            new_input_ids.append(_id)
        return new_input_ids
    return input_ids


def authors_word_repetition(sent: str, dup_rate: float, rng: random.Random) -> str:
    """``train.py`` ``prepare_features``, ``dup_type == "word"`` (``add_stop`` off)."""
    sent_list = sent.split(" ")
    sent_len = len(sent_list)
    add_len = rng.randrange(min(10, sent_len, max(2, int(dup_rate * sent_len))))
    dup = sorted(rng.sample(range(0, sent_len - 1), add_len))
    for i in dup:
        sent_list[i] = sent_list[i] + " " + sent_list[i]
    return " ".join(sent_list)


@pytest.mark.parametrize("dup_rate", [0.32, 0.1, 0.5])
def test_subword_repetition_is_the_authors_bpe_rule(dup_rate):
    for seed in range(300):
        length = 2 + seed % 40
        ids = [101, *range(1000, 1000 + length - 2), 102]
        ours = repeat_subwords(ids, dup_rate, random.Random(seed))
        assert ours == authors_bpe_repetition(ids, dup_rate, random.Random(seed)), (seed, length)
        assert ours[0] == 101 and ours[-1] == 102 and len(ours) - len(ids) < 10


@pytest.mark.parametrize("dup_rate", [0.32, 0.1])
def test_word_repetition_is_the_authors_word_rule(dup_rate):
    for seed in range(300):
        sentence = " ".join(f"w{i}" for i in range(1 + seed % 25))
        assert repeat_words(sentence, dup_rate, random.Random(seed)) == \
            authors_word_repetition(sentence, dup_rate, random.Random(seed)), seed


def tiny_config(**kwargs) -> ESimCSEConfig:
    encoder = tiny_bert_config(initializer_range=0.2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return ESimCSEConfig(encoder_config=encoder.to_dict(), **{"pooler_type": "cls", **kwargs})


@pytest.mark.parametrize("unit", ["subword", "word"])
def test_the_collator_repeats_view_1_from_each_examples_generator_the_same_in_every_epoch(tokenizer, unit):
    config = tiny_config(repetition_unit=unit)
    collator = ESimCSECollator(tokenizer, max_length=12, config=config, draws=ExampleDraws(seed=7))
    features = [{"sent0": s, "example_index": i} for i, s in enumerate(SENTENCES[:6])]
    batch = collator(features)
    rows = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"][:, 0], batch["attention_mask"][:, 0])]
    assert rows == tokenizer(SENTENCES[:6], truncation=True, max_length=12)["input_ids"]  # view 0: the sentence
    randoms = ExampleDraws(seed=7).python_randoms(features, "repetition")
    if unit == "subword":  # after truncation, as the authors repeat the tokenized, truncated row
        expected = [repeat_subwords(ids, config.dup_rate, rng) for ids, rng in zip(rows, randoms)]
    else:
        expected = tokenizer([repeat_words(s, config.dup_rate, rng) for s, rng in zip(SENTENCES[:6], randoms)],
                             truncation=True, max_length=12)["input_ids"]
    copies = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"][:, 1], batch["attention_mask"][:, 1])]
    assert copies == expected and copies != rows
    collator.set_epoch(3)  # the authors repeat once, in datasets.map: every epoch sees the same copies
    assert torch.equal(collator(features[::-1])["input_ids"][:, 1].flip(0)[:, : batch["input_ids"].shape[-1]],
                       batch["input_ids"][:, 1])
    packed = ESimCSECollator(tokenizer, max_length=12, config=config, draws=ExampleDraws(seed=7),
                             padding_free=True)(features)
    assert packed["input_ids"][0].tolist() == [t for r, c in zip(rows, copies) for t in (*r, *c)]


# ------------------------------------------------------------------------------ loss, gradients, momentum, queue
class AuthorsESimCSE:
    """``BertForCL`` + ``cl_forward`` + ``CLTrainer.compute_loss`` of the authors' code, for ``pooler_type cls``
    with ``neg_size > 0`` and ``momentum > 0``: one step's loss, then the momentum model encodes view 0 (eval
    mode) through the trained ``cls.mlp`` and the keys join ``pre_z1``, the newest ``neg_size`` kept; the queue
    restarts at every epoch (``self.pre_z1 = None`` in their epoch loop)."""

    def __init__(self, bert: BertModel, dense: torch.nn.Linear, temp: float, neg_size: int, momentum: float):
        self.bert, self.dense = bert, dense
        self.momentum_model = copy.deepcopy(bert).requires_grad_(False)
        self.temp, self.neg_size, self.momentum = temp, neg_size, momentum
        self.pre_z1 = None

    def parameters(self) -> list:
        return [*self.bert.parameters(), *self.dense.parameters()]

    def mlp(self, x):
        return torch.tanh(self.dense(x))

    def sim(self, x, y):
        return F.cosine_similarity(x, y, dim=-1) / self.temp

    def compute_loss(self, input_ids, attention_mask) -> torch.Tensor:
        batch_size = input_ids.size(0)
        flat_ids, flat_mask = input_ids.view(-1, input_ids.size(-1)), attention_mask.view(-1, input_ids.size(-1))
        outputs = self.bert(flat_ids, attention_mask=flat_mask)
        for param, param_m in zip(self.bert.parameters(), self.momentum_model.parameters()):
            param_m.data = param_m.data * self.momentum + param.data * (1.0 - self.momentum)
        pooler_output = self.mlp(outputs.last_hidden_state[:, 0].view(batch_size, 2, -1))
        z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
        cos_sim = self.sim(z1.unsqueeze(1), z2.unsqueeze(0))
        labels = torch.arange(cos_sim.size(0))
        if self.pre_z1 is not None:
            cos_sim = torch.cat((cos_sim, self.sim(z1.unsqueeze(1), self.pre_z1.unsqueeze(0))), 1)
        loss = F.cross_entropy(cos_sim, labels)
        with torch.no_grad():
            eval_z = self.mlp(self.momentum_model(input_ids[:, 0], attention_mask=attention_mask[:, 0])
                              .last_hidden_state[:, 0]).clone().detach()
        self.pre_z1 = eval_z if self.pre_z1 is None else torch.cat((self.pre_z1, eval_z), 0)[-self.neg_size:]
        return loss


class Recorder(TrainerCallback):
    """The gradients of every optimizer step, before the update."""

    def __init__(self, model):
        self.model, self.gradients = model, []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.gradients.append({n: p.grad.clone() for n, p in self.model.named_parameters() if p.grad is not None})


class RecordingCollator(ESimCSECollator):
    def __call__(self, features):
        batch = super().__call__(features)
        self.batches.append(batch)
        return batch


@pytest.mark.parametrize("settings", loss_settings("esimcse"))
def test_loss_gradients_momentum_and_queue_equal_the_authors_code_over_two_epochs(tokenizer, tmp_path, settings):
    config = tiny_config(queue_size=12, momentum=0.9, **settings)
    model = ESimCSEForPreTraining(config).double()
    model.tokenizer = tokenizer
    reference_bert = BertModel(tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                               add_pooling_layer=False).double()
    reference_bert.load_state_dict(model.encoder.state_dict())
    reference_dense = copy.deepcopy(model.mlp.dense)
    authors = AuthorsESimCSE(reference_bert, reference_dense, temp=config.temperature, neg_size=12, momentum=0.9)

    collator = RecordingCollator(tokenizer, max_length=16, config=config)
    collator.batches = []
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", remove_unused_columns=False, use_cpu=True,
                             per_device_train_batch_size=8, optim="sgd", learning_rate=0.02, weight_decay=0.0,
                             lr_scheduler_type="constant", num_train_epochs=2, logging_steps=1, save_strategy="no",
                             max_grad_norm=0.0,
                             dataloader_drop_last=True)
    losses = []

    class Trainer(ESimCSETrainer):
        def compute_losses(self, model, outputs, inputs):
            result = super().compute_losses(model, outputs, inputs)
            losses.append(result["loss"].item())
            return result

    recorder = Recorder(model)
    trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_dict({"sent0": SENTENCES}),
                      data_collator=collator, processing_class=tokenizer, callbacks=[recorder])
    trainer.train()
    assert len(collator.batches) == 4 == len(losses)  # 2 epochs of 2 steps

    names = {f"encoder.{n}": p for n, p in reference_bert.named_parameters()}
    names.update({f"mlp.dense.{n}": p for n, p in reference_dense.named_parameters()})
    for step, batch in enumerate(collator.batches):
        if step == 2:
            authors.pre_z1 = None  # their epoch loop
        for parameter in authors.parameters():
            parameter.grad = None
        loss = authors.compute_loss(batch["input_ids"], batch["attention_mask"])
        loss.backward()
        assert loss.item() == pytest.approx(losses[step], rel=1e-10), step
        for name, parameter in names.items():
            torch.testing.assert_close(recorder.gradients[step][name], parameter.grad, rtol=1e-9, atol=1e-12,
                                       msg=lambda m, name=name, step=step: f"step {step} {name}: {m}")
        with torch.no_grad():
            for parameter in authors.parameters():
                parameter -= 0.02 * parameter.grad
    for name, parameter in names.items():
        torch.testing.assert_close(dict(model.named_parameters())[name], parameter, rtol=1e-9, atol=1e-12)
    # csekit moves the momentum encoder after each step, the authors at the start of the next (the same recurrence):
    # the authors' model after their next step's update is csekit's after its last step
    for param, param_m in zip(reference_bert.parameters(), authors.momentum_model.parameters()):
        param_m.data = param_m.data * authors.momentum + param.data * (1.0 - authors.momentum)
    momentum = dict(model.momentum.encoder.named_parameters())
    for name, parameter in authors.momentum_model.named_parameters():
        torch.testing.assert_close(momentum[name], parameter, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(model.momentum.queue("keys"), authors.pre_z1.to(model.momentum.queue("keys")),
                               rtol=1e-9, atol=1e-12)
    assert int(model.momentum.queue_length) == 12  # 2 batches of 8 since the epoch began, the newest 12 kept


def test_keys_come_from_the_momentum_encoder_without_dropout_through_the_trained_mlp(tokenizer):
    config = ESimCSEConfig(encoder_config=tiny_bert_config(hidden_dropout_prob=0.5).to_dict(), pooler_type="cls")
    model = ESimCSEForPreTraining(config).train()
    with torch.no_grad():
        for parameter in model.momentum.encoder.parameters():
            parameter.add_(0.01)  # the momentum encoder differs from the encoder
    assert not model.momentum.encoder.training and model.encoder.training
    batch = ESimCSECollator(tokenizer, max_length=16, config=config)([{"sent0": s} for s in SENTENCES[:4]])
    keys = model(**batch).queue_keys
    again = model(**batch).queue_keys
    assert torch.equal(keys, again)  # no dropout
    expected = torch.tanh(model.mlp.dense(model.momentum.encoder(
        batch["input_ids"][:, 0], attention_mask=batch["attention_mask"][:, 0]).last_hidden_state[:, 0]))
    torch.testing.assert_close(keys, expected)
    assert not keys.requires_grad
    assert all(not p.requires_grad for p in model.momentum.parameters())


def test_matryoshka_terms_contrast_the_cut_vectors_with_the_cut_queue_of_inference_vectors(tokenizer, tmp_path):
    config = tiny_config(queue_size=8, matryoshka_dims=[8, 16])
    model = ESimCSEForPreTraining(config).double()
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", remove_unused_columns=False, use_cpu=True,
                             per_device_train_batch_size=8, max_steps=1, save_strategy="no")
    collator = ESimCSECollator(tokenizer, max_length=16, config=config)
    trainer = ESimCSETrainer(model=model, args=args, train_dataset=Dataset.from_dict({"sent0": SENTENCES}),
                             data_collator=collator, processing_class=tokenizer)
    trainer.train()
    queue = model.momentum.queue("vectors")
    assert queue is not None and queue.shape == (8, 32)
    assert not torch.allclose(queue, model.momentum.queue("keys"))  # the pooled [CLS] (MLP in training only)
    batch = collator([{"sent0": s} for s in SENTENCES[8:]])
    model.train()
    outputs = model(**batch)
    losses = trainer.compute_losses(model, outputs, batch)
    vectors = outputs.pooled  # mlp_only_train: the inference vectors are the pooled [CLS]
    for size in (8, 16):
        anchors, positives = vectors[:, 0, :size], vectors[:, 1, :size]
        logits = torch.cat([F.cosine_similarity(anchors[:, None], positives[None], dim=-1),
                            F.cosine_similarity(anchors[:, None], queue[None, :, :size], dim=-1)], dim=1) / 0.05
        expected = -(logits.diagonal() - logits.logsumexp(dim=1)).mean()
        torch.testing.assert_close(losses[f"matryoshka_{size}"], expected)


def test_the_published_model_has_no_momentum_encoder_and_checkpoints_keep_it(tokenizer, tmp_path):
    model = ESimCSEForPreTraining(tiny_config())
    published = model.sentence_encoder()
    assert not any(name.startswith("momentum.") for name in published.state_dict())
    assert any(name.startswith("momentum.queue_") for name in model.state_dict())
    assert {n for n in model.state_dict() if not n.startswith("momentum.")} == set(published.state_dict())
    model.momentum.stage(keys=torch.ones(3, 32))
    model.momentum.enqueue_staged()
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path / "checkpoint")
    restored = ESimCSEForPreTraining.from_pretrained(tmp_path / "checkpoint")
    assert not any(p.requires_grad for p in restored.momentum.encoder.parameters())  # frozen again
    assert torch.equal(restored.momentum.queue(), torch.ones(3, 32))  # the queue is in the checkpoint


def test_the_queue_keeps_the_newest_keys_in_order_and_empties_at_a_new_epoch():
    queue = MomentumEncoder(torch.nn.Linear(2, 2), momentum=0.5, queue_size=5, width=1)
    assert queue.queue() is None
    for start in (0, 3, 6):
        queue.stage(keys=torch.arange(start, start + 3.0)[:, None])
        queue.enqueue_staged()
    assert queue.queue()[:, 0].tolist() == [4.0, 5.0, 6.0, 7.0, 8.0]
    queue.start_epoch(0)
    assert queue.queue() is not None
    queue.start_epoch(1)
    assert queue.queue() is None


def test_the_momentum_encoder_starts_at_random_as_the_authors_code_or_as_a_copy(tiny_backbone):
    """Default (``momentum_init="random"``): BERT's initialisation, drawn afresh (the authors' ``cl_init``), not
    the backbone's weights; ``"copy"``: the backbone's weights."""
    from csekit.modeling.momentum import MomentumEncoder

    torch.manual_seed(0)
    model = ESimCSEForPreTraining.from_encoder(str(tiny_backbone), pooler_type="cls")
    assert model.config.momentum_init == "random"
    encoder, momentum = dict(model.encoder.named_parameters()), dict(model.momentum.encoder.named_parameters())
    std = model.encoder.config.initializer_range
    for name, parameter in momentum.items():
        if name.endswith("LayerNorm.weight"):
            assert torch.equal(parameter, torch.ones_like(parameter)), name
        elif name.endswith("bias"):
            assert torch.equal(parameter, torch.zeros_like(parameter)), name
        else:  # a Linear or Embedding weight: N(0, initializer_range), not the backbone's
            assert not torch.equal(parameter, encoder[name]), name
            spread = 4 * std / parameter.numel() ** 0.5  # four standard errors of the sample mean
            assert abs(float(parameter.std()) - std) < 0.25 * std and abs(float(parameter.mean())) < spread, name
    copied = ESimCSEForPreTraining.from_encoder(str(tiny_backbone), pooler_type="cls", momentum_init="copy")
    for name, parameter in copied.momentum.encoder.named_parameters():
        assert torch.equal(parameter, dict(copied.encoder.named_parameters())[name]), name
    assert isinstance(copied.momentum, MomentumEncoder)
    with pytest.raises(Exception, match="momentum_init"):  # the strict config's validation error
        ESimCSEConfig(encoder_config=tiny_bert_config().to_dict(), momentum_init="zeros")


@pytest.mark.parametrize("layout", ["false", "true"])
def test_cached_steps_with_a_filled_queue_equal_the_uncached_steps_by_count_and_by_tokens(layout, backbones,
                                                                                          sentences, tmp_path):
    """Three SGD steps with a queue larger than the batch (so steps 2-3 contrast with earlier keys) and dropout off,
    in float64: ``--mini_batch_size`` and ``--mini_batch_tokens`` end with the uncached run's weights and queue.
    (In float32 all three differ from the float64 run by rounding that the steps amplify, by about as much each.)"""
    from transformers import AutoTokenizer

    from conftest import recipe_flags
    from csekit.methods import METHODS

    method = METHODS["esimcse"]
    recipe, backbone = method.recipe_module.RECIPE, backbones[0.0]
    tokenizer = AutoTokenizer.from_pretrained(backbone)

    def trained(*flags):
        argv = ["--model_name_or_path", str(backbone), *recipe_flags(method, backbone), "--output_dir",
                str(tmp_path / "out"), "--per_device_train_batch_size", "8", "--max_seq_length", "16",
                "--report_to", "none", "--eval_strategy", "no", "--load_best_model_at_end", "false",
                "--disable_tqdm", "true", "--save_strategy", "no", "--optim", "sgd", "--learning_rate", "0.5",
                "--lr_scheduler_type", "constant", "--max_steps", "3", "--weight_decay", "0", "--max_grad_norm",
                "0", "--padding_free", layout, "--queue_size", "20", "--momentum", "0.5", *flags]
        model_args, data_args, training_args, extra = recipe.parse(argv)
        torch.manual_seed(0)
        model = recipe.build_model(str(backbone), model_args).double()
        model.tokenizer = tokenizer
        recipe.trainer_class(model=model, args=training_args, data_collator=recipe.collator(
            tokenizer, model, data_args, extra), train_dataset=Dataset.from_dict({"sent0": sentences[:32]})).train()
        assert int(model.momentum.queue_length) == 20
        return {n: p.detach().clone() for n, p in model.named_parameters()}, model.momentum.queue("keys")

    weights, queue = trained()
    for flags in (("--mini_batch_size", "3"), ("--mini_batch_tokens", "90")):
        cached_weights, cached_queue = trained(*flags)
        torch.testing.assert_close(cached_queue, queue, rtol=1e-9, atol=1e-10)
        for name, tensor in weights.items():
            torch.testing.assert_close(cached_weights[name], tensor, rtol=1e-9, atol=1e-10, msg=f"{flags} {name}")
