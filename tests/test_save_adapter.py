"""``--save_adapter`` / ``save_pretrained(..., save_adapter=True)``: a model trained with LoRA publishes, beside its
merged weights, ``adapter/``, a sentence-transformers folder whose Transformer module is peft's adapter over the
backbone's Hub id. Oracles: ``SentenceTransformer(folder/adapter)`` (sentence-transformers, transformers and peft
load the base model from the Hub cache and put the adapter in) against csekit's model with its adapters unmerged, and
against the merged folder; the base model alone, to show the adapter is live.

The backbone is a tiny Qwen3 in a Hugging Face cache (offline), loaded by its Hub id as a user loads one."""

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModel, AutoTokenizer

from csekit import cli
from csekit.errors import DataError
from csekit.evaluation.encoders import load_embedder
from csekit.modeling import SimCSEModel
from csekit.trainers import CSETrainingArguments, SimCSETrainer
from test_decoders import SENTENCES, SMALL, bpe_tokenizer

peft = pytest.importorskip("peft", reason="LoRA needs peft: pip install 'csekit[peft]'")
SentenceTransformer = pytest.importorskip("sentence_transformers").SentenceTransformer

HUB_ID = "org/tiny-qwen3"
ROWS = Dataset.from_dict({"sent0": [f"sentence {i} tells of the harbour {i * 7}" + " very" * (i % 5)
                                    for i in range(32)]})


@pytest.fixture
def hub_decoder(tmp_path, monkeypatch):
    """A tiny Qwen3 (seeded random weights, BPE tokenizer) as ``from_pretrained`` leaves it in a Hub cache, offline."""
    from fake_hub import build_hub_cache

    tokenizer = bpe_tokenizer()
    config = AutoConfig.for_model("qwen3", **SMALL, eos_token_id=tokenizer.eos_token_id,
                                  bos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    folder = tmp_path / "tiny-qwen3"
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    build_hub_cache(tmp_path / "hf-cache", HUB_ID, folder)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return folder


def trained(out, **overrides):
    args = CSETrainingArguments(**{**dict(
        output_dir=str(out), per_device_train_batch_size=8, max_steps=2, save_strategy="no", eval_strategy="no",
        load_best_model_at_end=False, report_to="none", use_cpu=True, learning_rate=1e-2, lora_r=4,
        save_adapter=True), **overrides})
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(HUB_ID, pooler_type="last_token", prompt="query: ")
    trainer = SimCSETrainer(model=model, args=args, train_dataset=ROWS,
                            processing_class=AutoTokenizer.from_pretrained(HUB_ID))
    trainer.train()
    return trainer


def test_the_adapter_folder_encodes_as_the_trained_model_and_its_merged_folder(hub_decoder, tmp_path):
    out = tmp_path / "out"
    trainer = trained(out)
    model = trainer.model.eval()
    unmerged = np.asarray(model.encode(SENTENCES))  # the adapters as trained, in peft's layers
    trainer.save_model()
    adapter = out / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == HUB_ID and config["r"] == 4 and config["inference_mode"]
    assert not (adapter / "config.json").exists() and (adapter / "adapter_model.safetensors").is_file()
    assert str(tmp_path) not in "".join(path.read_text() for path in adapter.rglob("*.json"))
    assert json.loads((adapter / "config_sentence_transformers.json").read_text())["prompts"] == {
        "default": "query: "}

    from_adapter = SentenceTransformer(str(adapter), device="cpu").encode(SENTENCES)
    assert np.abs(from_adapter - unmerged).max() <= 1e-6
    merged = SentenceTransformer(str(out), device="cpu").encode(SENTENCES)
    assert np.abs(from_adapter - merged).max() <= 1e-5
    assert np.abs(np.asarray(AutoModel.from_pretrained(out).encode(SENTENCES)) - from_adapter).max() <= 1e-5
    base = SimCSEModel.from_encoder(HUB_ID, pooler_type="last_token", prompt="query: ").eval()
    base.tokenizer = AutoTokenizer.from_pretrained(out)
    assert np.abs(np.asarray(base.encode(SENTENCES)) - from_adapter).max() > 1e-3  # the adapter is live

    embed, info = load_embedder(str(adapter), device="cpu")  # csekit evaluate reads it through sentence-transformers
    assert np.abs(embed(SENTENCES) - from_adapter).max() <= 1e-6 and info["prompt"] == "query: "

    model.save_pretrained(out)  # saved again without the adapter: no stale adapter/ beside the new weights
    assert not adapter.exists()


def test_what_cannot_be_an_adapter_folder_is_refused_in_one_line(hub_decoder, tmp_path, monkeypatch):
    with pytest.raises(DataError, match="--save_adapter: the run trains no adapters; or publish the merged weights"):
        trained(tmp_path / "a", lora_r=None)
    torch.manual_seed(0)
    local = SimCSEModel.from_encoder(str(hub_decoder), pooler_type="last_token")
    with pytest.raises(DataError, match=f"its backbone is the local folder {hub_decoder}, which the adapter folder's "
                                        "users do not have; train from the backbone's Hub id"):
        SimCSETrainer(model=local, args=CSETrainingArguments(
            output_dir=str(tmp_path / "b"), use_cpu=True, report_to="none", lora_r=4, save_adapter=True),
            train_dataset=ROWS, processing_class=AutoTokenizer.from_pretrained(hub_decoder))
    model = trained(tmp_path / "c", save_adapter=False).model
    model.save_pretrained(tmp_path / "c-adapter", save_adapter=True)  # the Python door
    assert (tmp_path / "c-adapter" / "adapter" / "adapter_config.json").is_file()
    plain = SimCSEModel.from_encoder(HUB_ID, pooler_type="last_token")
    plain.tokenizer = AutoTokenizer.from_pretrained(HUB_ID)
    with pytest.raises(ValueError, match="save_adapter=True.: the model holds no LoRA adapters"):
        plain.save_pretrained(tmp_path / "d", save_adapter=True)
    assert not (tmp_path / "d").exists()

    real = __import__("importlib").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(DataError, match=rf"an adapter folder \(LoRA weights over {HUB_ID}\), which loads with "
                                        r"sentence-transformers and peft; peft not installed: pip install "
                                        r"'csekit\[st,peft\]'"):
        load_embedder(str(tmp_path / "c-adapter" / "adapter"), device="cpu")


def test_the_command_line_publishes_the_adapter_folder(hub_decoder, corpus, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    flags = ["--model_name_or_path", HUB_ID, "--pooler_type", "last_token", "--prompt", "query: ", "--train_file",
             str(corpus), "--per_device_train_batch_size", "8", "--max_steps", "2", "--save_strategy", "no",
             "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_seq_length", "16",
             "--data_dir", str(data_dir), "--lora_r", "8"]
    assert cli.main(["train", "simcse", *flags, "--save_adapter", "true", "--output_dir", str(out)]) == 0
    expected = np.asarray(AutoModel.from_pretrained(out).encode(SENTENCES))
    assert np.abs(SentenceTransformer(str(out / "adapter"), device="cpu").encode(SENTENCES) - expected).max() <= 1e-5
    card = (out / "README.md").read_text()
    assert f"`adapter/` holds the trained LoRA adapter alone, over `{HUB_ID}`" in card and str(tmp_path) not in card
    refused = tmp_path / "refused"
    assert cli.main(["train", "simcse", *flags[:-2], "--save_adapter", "true", "--output_dir", str(refused)]) == 2
    assert "--save_adapter: the run trains no adapters" in capsys.readouterr().err and not refused.exists()
