"""Shared fixtures: tiny random encoders built in code, the real MiniLM tokenizer, the data folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, RobertaConfig

from csekit.data import resolve_data_dir
from csekit.loading import embedded_minilm_path

REPO_ROOT = Path(__file__).resolve().parent.parent


def tiny_bert_config(**overrides) -> BertConfig:
    """A 2-layer, hidden-32 BERT with the real 30522-token vocabulary (so the MiniLM tokenizer fits)."""
    values = dict(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return BertConfig(**values)


def tiny_roberta_config(**overrides) -> RobertaConfig:
    values = dict(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=66, pad_token_id=0, bos_token_id=101, eos_token_id=102,
    )
    values.update(overrides)
    return RobertaConfig(**values)


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(embedded_minilm_path())


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    return embedded_minilm_path()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return resolve_data_dir()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def run_isolated_python(code: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where csekit cannot be imported.

    The repository root and the installed project are removed from ``sys.path`` first, so a model that loads there
    loads through ``trust_remote_code`` alone.
    """
    prelude = (
        "import sys\n"
        f"sys.path = [p for p in sys.path if p not in ('', {str(REPO_ROOT)!r}) and '__editable__' not in p]\n"
        # a setuptools editable install imports through a meta-path finder, not a sys.path entry
        "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
        "import importlib.util\n"
        "assert all(importlib.util.find_spec(name) is None for name in ('csekit', 'modeling', 'trainers'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def saved_tiny_model(tmp_path_factory, tokenizer):
    """A tiny random SimCSE model saved with a tokenizer: a complete csekit model folder."""
    from csekit.modeling import SimCSEConfig, SimCSEModel

    folder = tmp_path_factory.mktemp("tiny_simcse")
    config = SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(), pooler_type="avg")
    model = SimCSEModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
