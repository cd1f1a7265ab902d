"""``--bidirectional``: a decoder backbone attending both ways, LLM2Vec's conversion (``modeling/bidirectional.py``).

Oracle: LLM2Vec's own mechanism (McGill-NLP/llm2vec, ``models/bidirectional_*.py`` and ``attn_mask_utils.py``),
written here on transformers' plain decoder with the same weights in float64: every attention module's
``is_causal`` set to ``False`` (LLM2Vec's ``Modified*Attention`` classes) and the mask built as its
``AttentionMaskConverter(is_causal=False).to_4d`` builds it, a 4D float mask with the dtype's minimum on padded keys
and nothing else, handed to the model as a prepared mask; then mean pooling over the real tokens (LLM2Vec's
``mean`` without an instruction). csekit's conversion goes through the config's ``is_causal`` instead, so the two
share no code. (llm2vec itself, 0.2.3 on PyPI, pins transformers <= 4.44.2 and imports attention classes transformers
5 removed, such as ``LlamaSdpaAttention``, so it cannot run beside csekit.) Both a padded batch and one sentence
(no padding, where SDPA's own causal flag would decide) are compared, on either padding side."""

import json

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from csekit import cli
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.preflight import DECODER_BACKBONES
from test_decoders import SENTENCES, decoders_dir  # noqa: F401  (the tiny decoders fixture)


def llm2vec_mean(folder, sentences, padding_side: str) -> torch.Tensor:
    """LLM2Vec's bidirectional forward + mean pooling, float64, on transformers' plain decoder in ``folder``."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token, tokenizer.padding_side = tokenizer.eos_token, padding_side
    model = AutoModel.from_pretrained(folder).double().eval()  # (as csekit's model: float32 buffers, then float64)
    for module in model.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = False
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    width = batch["input_ids"].shape[1]
    keys = batch["attention_mask"][:, None, None, :].expand(-1, 1, width, width)  # (batch, 1, queries, keys)
    mask = torch.zeros(keys.shape, dtype=torch.float64).masked_fill(keys == 0, torch.finfo(torch.float64).min)
    with torch.no_grad():
        states = model(input_ids=batch["input_ids"], attention_mask=mask).last_hidden_state
    real = batch["attention_mask"].to(torch.float64)[..., None]
    return (states * real).sum(1) / real.sum(1)


def csekit_vectors(model, sentences, padding_side: str) -> torch.Tensor:
    model.tokenizer.padding_side = padding_side  # (the tokenizer csekit prepares: the end-of-sequence token pads)
    batch = model.tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).embeddings


@pytest.mark.parametrize("family", sorted(DECODER_BACKBONES))
def test_a_bidirectional_decoder_equals_llm2vecs_conversion_in_float64(family, decoders_dir):  # noqa: F811
    folder = decoders_dir / family
    model = SimCSEModel.from_encoder(str(folder), pooler_type="avg", bidirectional=True).double().eval()
    for side in ("right", "left"):
        for sentences in (SENTENCES, SENTENCES[2:]):  # a padded batch, and one sentence with no padding at all
            expected = llm2vec_mean(folder, sentences, side)
            ours = csekit_vectors(model, sentences, side)
            assert (ours - expected).abs().max() <= 1e-10 * expected.abs().max(), (side, len(sentences))
    # the attention functions that decide causality from the module alone (flash attention on a GPU; SDPA when no
    # mask is built) read its flag
    assert not any(getattr(module, "is_causal", False) for module in model.encoder.modules())
    # sentences packed in one row, positions restarting per sentence, encode as they do padded (the model's probe)
    probe = [model.tokenizer(text)["input_ids"] for text in SENTENCES]
    assert model.use_packed_attention_if_exact(probe) is None
    causal = SimCSEModel.from_encoder(str(folder), pooler_type="avg").double().eval()
    assert (csekit_vectors(causal, SENTENCES, "right") - llm2vec_mean(folder, SENTENCES, "right")).abs().max() > 1e-3


def test_a_model_trained_from_a_bidirectional_one_attends_as_its_own_config_says(decoders_dir, tmp_path):  # noqa: F811
    """Fine-tuning starts from a csekit folder's encoder; without ``bidirectional`` the new model attends causally
    (its config says so, and so does its published folder), with it bidirectionally."""
    folder = decoders_dir / "qwen3"
    bidirectional = SimCSEModel.from_encoder(str(folder), pooler_type="avg", bidirectional=True)
    bidirectional.save_pretrained(tmp_path / "bi")
    causal = SimCSEModel.from_encoder(str(folder), pooler_type="avg").eval()
    again = SimCSEModel.from_encoder(str(tmp_path / "bi"), pooler_type="avg").eval()
    assert not again.config.bidirectional
    assert all(module.is_causal for module in again.encoder.modules() if hasattr(module, "is_causal"))
    assert (csekit_vectors(again, SENTENCES, "right") - csekit_vectors(causal, SENTENCES, "right")).abs().max() == 0
    kept = SimCSEModel.from_encoder(str(tmp_path / "bi"), pooler_type="avg", bidirectional=True).eval()
    assert (csekit_vectors(kept, SENTENCES, "right")
            - csekit_vectors(bidirectional.eval(), SENTENCES, "right")).abs().max() == 0


def test_a_bidirectional_decoder_may_pool_its_first_token(decoders_dir):  # noqa: F811
    """Under bidirectional attention the first token sees the whole sentence, as an encoder's [CLS] does."""
    config = AutoConfig.from_pretrained(decoders_dir / "llama").to_dict()
    assert SimCSEConfig(encoder_config=config, pooler_type="cls", bidirectional=True).bidirectional
    with pytest.raises(Exception, match="causal attention. computes its first token from itself alone"):
        SimCSEConfig(encoder_config=config, pooler_type="cls")


def test_the_command_line_trains_a_bidirectional_decoder_whose_folder_loads_as_it_was_trained(
        decoders_dir, corpus, tmp_path, capsys):  # noqa: F811
    """Trained with LoRA through the recipe: ``AutoModel`` gives the trained model's vectors, the folder has no
    sentence-transformers files (its Transformer module would load the decoder causal) and the card says why;
    ``export-st --layout remote-code`` is the sentence-transformers folder that encodes alike."""
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    flags = ["--model_name_or_path", str(decoders_dir / "qwen3"), "--pooler_type", "avg", "--bidirectional", "true",
             "--train_file", str(corpus), "--per_device_train_batch_size", "8", "--max_steps", "2",
             "--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end", "false",
             "--max_seq_length", "16", "--do_test_eval", "true", "--lora_r", "8"]  # scored and carded
    assert cli.main(["train", "simcse", *flags, "--output_dir", str(out)]) == 0
    loaded = AutoModel.from_pretrained(out)
    assert loaded.config.bidirectional and not (out / "modules.json").exists()
    assert "attends bidirectionally" in (out / "README.md").read_text()
    assert not any(getattr(module, "is_causal", False) for module in loaded.encoder.modules())
    expected = loaded.encode(SENTENCES)
    assert cli.main(["export-st", str(out), str(tmp_path / "st"), "--layout", "remote-code"]) == 0
    st = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    assert np.abs(st.encode(SENTENCES) - expected).max() <= 1e-6
    assert cli.main(["export-st", str(out), str(tmp_path / "plain"), "--layout", "plain"]) == 2
    capsys.readouterr()
    assert json.loads((out / "config.json").read_text())["bidirectional"] is True

