"""Decoder backbones (``csekit.preflight.DECODER_BACKBONES``): every family trains, saves and loads in
sentence-transformers with csekit's vectors, for each decoder pooler and either padding side.

Oracles: the poolers against a direct reading of their definitions (SGPT's position weights, the last real token)
written here row by row; the saved folders against ``SentenceTransformer(folder)`` (its own ``lasttoken``,
``weightedmean`` and ``mean`` Pooling). Each family is a tiny random config with a byte-level BPE tokenizer trained
by ``tokenizers``, with an end-of-sequence token and no pad token, as decoder checkpoints ship."""

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedTokenizerFast

from csekit import cli
from csekit.errors import DataError
from csekit.methods import METHODS, get_method
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.modeling.pooling import pool
from csekit.preflight import DECODER_BACKBONES, check_method_backbone, prepare_decoder_tokenizer
from csekit.trainers import CSETrainingArguments, SimCSETrainer
from csekit.trainers.collators import enable_padding_free

EOS = "<|endoftext|>"
SMALL = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             intermediate_size=64, max_position_embeddings=128, head_dim=16)
SENTENCES = ["A man is playing a guitar.", "snow", "The red boats of the quiet harbour rest in the evening light."]
DECODER_POOLERS = ("last_token", "weighted_avg", "avg")


def bpe_tokenizer(eos=EOS) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    text = [f"sentence {i} tells of the {colour} harbour {i * 7}. A man is playing a guitar."
            for i, colour in enumerate(["red", "old", "quiet", "bright"] * 50)]
    tokenizer.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=[eos] if eos else [],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=eos)


def save_tiny_decoder(folder, family: str = "qwen3", **config):
    """A tiny decoder of ``family`` (``SMALL`` and ``config``; random weights, seeded) and the BPE tokenizer, with an
    end-of-sequence token and no pad token, as decoder checkpoints ship, saved in ``folder``."""
    tokenizer = bpe_tokenizer()
    model_config = AutoConfig.for_model(family, **SMALL, **config, eos_token_id=tokenizer.eos_token_id,
                                        bos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    AutoModel.from_config(model_config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def decoders_dir(tmp_path_factory):
    """One saved tiny decoder per family: random weights (seeded), the BPE tokenizer, no pad token."""
    root = tmp_path_factory.mktemp("decoders")
    for family in DECODER_BACKBONES:
        save_tiny_decoder(root / family, family)
    return root


# ------------------------------------------------------------------------------------------------ pooler oracles
def padded(lengths, left: bool):
    width = max(lengths)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        if left:
            mask[row, width - length:] = 1
        else:
            mask[row, :length] = 1
    return mask


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_decoder_poolers_are_their_definitions_on_either_padding_side(left):
    torch.manual_seed(0)
    mask = padded([5, 2, 7, 1], left)
    states = torch.randn(4, 7, 6, dtype=torch.float64)
    last = pool("last_token", [2], {2: states}, mask)
    weighted = pool("weighted_avg", [2], {2: states}, mask)
    for row in range(4):
        real = [position for position in range(7) if mask[row, position]]
        assert torch.equal(last[row], states[row, real[-1]])  # the last real token
        weights = torch.arange(1, len(real) + 1, dtype=torch.float64)  # SGPT: 1 .. n over the real tokens
        expected = (states[row, real] * weights[:, None]).sum(0) / weights.sum()
        assert torch.allclose(weighted[row], expected, atol=1e-12, rtol=0)


# ------------------------------------------------------------------------------------------------ train, save, load
def train_two_steps(folder, pooler: str, out, padding_side: str = "right") -> SimCSEModel:
    model = SimCSEModel.from_encoder(str(folder), pooler_type=pooler)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = padding_side
    dataset = Dataset.from_dict({"sent0": [f"sentence {i} tells of the harbour {i * 7}" + " very" * (i % 5)
                                           for i in range(32)]})
    args = CSETrainingArguments(output_dir=str(out / "run"), per_device_train_batch_size=8, max_steps=2,
                                save_strategy="no", eval_strategy="no", load_best_model_at_end=False,
                                report_to="none", use_cpu=True, learning_rate=1e-3)
    trainer = SimCSETrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(out / "model"))
    return model


@pytest.mark.parametrize("pooler", DECODER_POOLERS)
@pytest.mark.parametrize("family", sorted(DECODER_BACKBONES))
def test_a_decoder_trains_and_its_folder_loads_in_sentence_transformers_with_its_vectors(
        family, pooler, decoders_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    before = {name: value.clone() for name, value in AutoModel.from_pretrained(decoders_dir / family).state_dict()
              .items()}
    model = train_two_steps(decoders_dir / family, pooler, tmp_path)
    trained = model.encoder.state_dict()
    assert any(not torch.equal(trained[name], before[name]) for name in before)  # the steps moved the decoder
    expected = model.encode(SENTENCES)
    loaded = SentenceTransformer(str(tmp_path / "model"), device="cpu")
    assert np.abs(loaded.encode(SENTENCES) - expected).max() <= 1e-6
    assert np.abs(AutoModel.from_pretrained(tmp_path / "model").encode(SENTENCES) - expected).max() <= 1e-6
    pooling = json.loads((tmp_path / "model" / "1_Pooling" / "config.json").read_text())["pooling_mode"]
    assert pooling == {"last_token": "lasttoken", "weighted_avg": "weightedmean", "avg": "mean"}[pooler]
    saved = AutoTokenizer.from_pretrained(tmp_path / "model")
    appends = saved(SENTENCES[0])["input_ids"][-1] == saved.eos_token_id
    assert appends == (pooler == "last_token")  # the end-of-sequence token the last-token pooler reads
    model.tokenizer.padding_side = "left"  # the same vectors from left-padded batches
    assert np.abs(model.encode(SENTENCES) - expected).max() <= 1e-5


def test_left_and_right_padded_training_give_the_same_model(decoders_dir, tmp_path):
    right = train_two_steps(decoders_dir / "qwen3", "last_token", tmp_path / "right", "right")
    left = train_two_steps(decoders_dir / "qwen3", "last_token", tmp_path / "left", "left")
    for name, value in right.state_dict().items():
        assert torch.allclose(value, left.state_dict()[name], atol=1e-5, rtol=0), name


def test_the_command_line_trains_a_decoder_with_last_token_pooling(decoders_dir, corpus, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    assert cli.main(["train", "simcse", "--model_name_or_path", str(decoders_dir / "qwen3"), "--pooler_type",
                     "last_token", "--train_file", str(corpus), "--output_dir", str(out),
                     "--per_device_train_batch_size", "8", "--max_steps", "2", "--save_strategy", "no",
                     "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_seq_length", "16",
                     "--do_test_eval", "false"]) == 0
    expected = AutoModel.from_pretrained(out).encode(SENTENCES)
    assert np.abs(SentenceTransformer(str(out), device="cpu").encode(SENTENCES) - expected).max() <= 1e-6


# ------------------------------------------------------------------------------------------------ refused, one line
def test_a_first_token_pooler_on_a_decoder_is_refused(decoders_dir):
    config = AutoConfig.from_pretrained(decoders_dir / "llama").to_dict()
    with pytest.raises(Exception, match="pooler_type 'cls': a decoder .'llama', causal attention. computes its first "
                                        "token"):
        SimCSEConfig(encoder_config=config, pooler_type="cls")


def test_a_decoder_without_an_end_of_sequence_token_is_refused_for_last_token_pooling():
    tokenizer = bpe_tokenizer(eos=None)
    with pytest.raises(DataError, match="its tokenizer has no end-of-sequence token, which last-token pooling reads"):
        prepare_decoder_tokenizer(tokenizer, "qwen2", "last_token", "tiny")
    encoder = bpe_tokenizer()
    assert prepare_decoder_tokenizer(encoder, "bert", "last_token", "tiny")("a")["input_ids"][-1] != 0  # encoders


@pytest.mark.parametrize("method", ["cmlm_cse", "diffcse"])
def test_methods_that_need_a_masked_language_model_refuse_a_decoder(method, decoders_dir, corpus, tmp_path, capsys):
    with pytest.raises(DataError, match=f"a decoder .'mistral'., which {get_method(method).title} cannot train"):
        check_method_backbone(get_method(method), "mistral", "mistral")
    check_method_backbone(get_method("simcse"), "mistral", "mistral")  # SimCSE can
    out = tmp_path / "out"
    code = cli.main(["train", method, "--model_name_or_path", str(decoders_dir / "mistral"), "--pooler_type", "avg",
                     "--train_file", str(corpus), "--output_dir", str(out), "--max_steps", "1"])
    assert code == 2 and not out.exists()
    assert f"which {get_method(method).title} cannot train" in capsys.readouterr().err


def test_a_plain_decoder_is_scored_as_csekit_pools_it_and_a_first_token_pooler_refused(decoders_dir):
    """``csekit evaluate`` on a plain decoder folder (and a recipe's base-model row): the pad and end-of-sequence
    tokens prepared as for training, so the vectors are the untrained csekit model's; no pooler, or a first-token
    one, is one line."""
    from csekit.evaluation.encoders import load_embedder

    folder = decoders_dir / "mistral"
    for pooler in ("last_token", "weighted_avg"):
        embed, _ = load_embedder(str(folder), pooler=pooler, device="cpu")
        # the model prepares the decoder's tokenizer it loads as a trainer prepares it
        expected = SimCSEModel.from_encoder(str(folder), pooler_type=pooler).encode(SENTENCES)
        assert np.abs(embed(SENTENCES) - expected).max() <= 1e-6
    for pooler in (None, "cls"):
        with pytest.raises(DataError, match="a decoder .'mistral', causal attention.*use last_token"):
            load_embedder(str(folder), pooler=pooler, device="cpu")


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "whole"])
@pytest.mark.parametrize("method", [method for method in METHODS.values() if not method.not_on_decoders],
                         ids=lambda method: method.name)
def test_every_method_that_takes_a_decoder_trains_one_at_both_ends_of_its_folder(method, lora, decoders_dir, corpus,
                                                                                  tmp_path):
    """Each method the registry lets train a decoder trains the tiny Qwen3 through its recipe, with LoRA adapters
    (where it takes them) and without, and its folder encodes alike through ``AutoModel`` and, where it has the
    layout, ``SentenceTransformer(folder)``."""
    if lora and method.no_lora:
        pytest.skip(f"{method.name}: {method.no_lora}")
    from sentence_transformers import SentenceTransformer

    from conftest import recipe_flags

    data = corpus
    if method.test_data == "pairs":
        data = tmp_path / "pairs.csv"
        data.write_text("sent0,sent1\n" + "".join(f"a traveller reads map {i},someone holds map {i}\n"
                                                  for i in range(64)))
    flags = ["last_token" if flag == "cls" else flag for flag in recipe_flags(method)]
    out = tmp_path / "out"
    argv = ["train", method.name, "--model_name_or_path", str(decoders_dir / "qwen3"), *flags, "--train_file",
            str(data), "--output_dir", str(out), "--do_test_eval", "false"]
    if method.name != "clsr":
        argv += ["--per_device_train_batch_size", "8", "--max_steps", "2", "--save_strategy", "no", "--eval_strategy",
                 "no", "--load_best_model_at_end", "false", "--max_seq_length", "16"]
    if lora:
        argv += ["--lora_r", "4"]
    assert cli.main(argv) == 0
    vectors = AutoModel.from_pretrained(out).encode(SENTENCES)
    assert np.isfinite(vectors).all()
    if (out / "modules.json").is_file():
        assert np.abs(SentenceTransformer(str(out), device="cpu").encode(SENTENCES) - vectors).max() <= 1e-6


# ------------------------------------------------------------------------------------------------ packing
@pytest.mark.parametrize("family", [*sorted(DECODER_BACKBONES), "mistral-window-2", "qwen3-heads-4-2"])
def test_a_causal_decoder_packs_exactly_with_positions_restarting_per_sentence(family, decoders_dir, tmp_path):
    """A packed row of a causal decoder (csekit's packed attention: causal inside each sentence, and inside
    Mistral's sliding window) pools as transformers' own padded causal attention does, in float64, for every token
    (mean pooling); the model's probe therefore trains it packed."""
    folder = decoders_dir / family.split("-")[0]
    if family != folder.name:  # a window shorter than the sentences: the band applies inside each one; or
        # grouped-query attention with two key/value heads, each read by two query heads
        changes = {"sliding_window": 2} if "window" in family else {"num_attention_heads": 4, "num_key_value_heads": 2,
                                                                     "head_dim": 8}
        config = AutoConfig.from_pretrained(folder, **changes)
        torch.manual_seed(0)
        AutoModel.from_config(config).save_pretrained(tmp_path)
        AutoTokenizer.from_pretrained(folder).save_pretrained(tmp_path)
        folder = tmp_path
    trained = SimCSEModel.from_encoder(str(folder), pooler_type="last_token")
    assert enable_padding_free(trained, trained.tokenizer, 24) is True  # what a run decides before its first step
    model = SimCSEModel.from_encoder(str(folder), pooler_type="avg").double().eval()
    ids = [model.tokenizer(text)["input_ids"] for text in SENTENCES]
    mask = padded([len(row) for row in ids], left=False)
    tokens = torch.zeros_like(mask)
    for row, sentence in enumerate(ids):
        tokens[row, :len(sentence)] = torch.tensor(sentence)
    with torch.no_grad():
        expected = model.pool_tokens(tokens, mask)  # transformers' causal (and windowed) mask, padded
        assert model.use_packed_attention_if_exact(ids) is None
        row = torch.tensor([token for sentence in ids for token in sentence])[None]
        lengths = torch.tensor([[len(sentence)] for sentence in ids])
        packed = model.pool_packed(row, lengths)
        laid_out = model.pool_packed(row, lengths, layout=mask)  # one block at the padded width (compiled, GPU)
    assert (packed - expected).abs().max() <= 1e-10 * expected.abs().max()
    assert (laid_out - expected).abs().max() <= 1e-10 * expected.abs().max()
