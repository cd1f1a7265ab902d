"""The MTEB description of a csekit model folder: what a leaderboard entry asks beside the results files.

``mteb_model_meta.json`` holds the fields of mteb's ``ModelMeta`` (mteb 2.26), filled from what the folder records,
so a submission copies it: the name and revision, the release date, the parameters (counted in the safetensors
headers, nothing is loaded), the embedding dimension and maximum tokens, the similarity function, the training
datasets under MTEB's task names, the model it was adapted from, the public training data, and the public training
code where the caller names it. It is plain
JSON: csekit writes it without the mteb package, and the tests validate it with ``ModelMeta`` itself.

    # a dict of ModelMeta's fields
    record = model_meta_record("outputs/simcse", repo_id="me/simcse-minilm")
    # mteb_model_meta.json
    write_model_meta("outputs/simcse", repo_id="me/simcse-minilm")
"""

import datetime
from pathlib import Path
from typing import Optional

from safetensors import safe_open

from ..atomic import write_json
from ..errors import DataError
from ..loading import ARGUMENTS_FILE
from ..preflight import weight_files
from ..st_folder import module_entries, module_kind
from ..st_folder import read_json as st_read_json
from .model_folder import FolderConfig, base_model_id, read_json

MODEL_META_FILE = "mteb_model_meta.json"
# training data (substrings of the recipe's data arguments) -> the MTEB tasks whose train split it is
MTEB_TRAINING_TASKS = {"stsb": "STSBenchmark", "sts-train": "STSBenchmark"}
# training data -> where it is public
PUBLIC_TRAINING_DATA = {"wiki1m": "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse",
                        "nli": "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse"}


def parameter_count(folder: Path) -> int:
    """The number of weights the folder's safetensors files hold, read from their headers."""
    total = 0
    for path in weight_files(folder):
        with safe_open(str(path), "pt") as weights:
            for key in weights.keys():
                count = 1
                for size in weights.get_slice(key).get_shape():
                    count *= size
                total += count
    return total


# the settings that give a module's output size (a Pooling module's in sentence-transformers 6's format, then the old)
SIZE_KEYS = {"Dense": ("out_features",), "Pooling": ("embedding_dimension", "word_embedding_dimension")}


def embedding_dimension(folder: Path, config) -> int:
    """The size of the vectors the model returns: its sentence-transformers modules' last Dense or Pooling output
    (``modules.json`` read by ``csekit.st_folder.module_entries``: a path outside the folder, or an
    entry without one, is refused in one line), else the config's representation size (CLSR) or the backbone's
    hidden size."""
    size = None
    for module in module_entries(folder):  # each path checked to be the folder or a sub-folder of it
        settings = st_read_json(folder / module["path"] / "config.json")
        keys = SIZE_KEYS.get(module_kind(module), ())
        key = next((key for key in keys if key in settings), None)
        if key is not None:
            if type(settings[key]) is not int or settings[key] <= 0:
                raise DataError(f"{folder / module['path'] / 'config.json'}: {key} {settings[key]!r} is not a size")
            size = settings[key]
    if size:
        return size
    size = config.values.get("representation_size")  # CLSR's e
    return int(size or config.encoder["hidden_size"])


def model_meta_record(model_dir, repo_id: Optional[str] = None, revision: Optional[str] = None,
                      license: str = "apache-2.0", release_date: Optional[str] = None,
                      training_code: Optional[str] = None, name: Optional[str] = None) -> dict:
    """The fields of mteb's ``ModelMeta`` for a csekit folder (see the module docstring). ``repo_id`` is the Hub id
    it is published under (its name and reference), ``name`` the name of a model not published yet (default
    ``csekit/<folder name>``), ``revision`` its commit (``None`` until pushed), ``training_code`` where the training
    code is public (a folder cannot know; ``None`` until it is given)."""

    folder = Path(model_dir)
    config = FolderConfig(folder)
    arguments = read_json(folder / ARGUMENTS_FILE) if (folder / ARGUMENTS_FILE).is_file() else {}
    data = " ".join(str(value) for value in arguments.get("data_args", {}).values())
    settings = config.sentence_transformers_settings or {}
    frameworks = ["PyTorch", "Sentence Transformers"] if (folder / "modules.json").is_file() else ["PyTorch"]
    encoder = config.encoder
    return {
        "name": repo_id or name or f"csekit/{folder.resolve().name}",
        "loader": None,  # mteb runs the model through csekit (`csekit evaluate --mteb`), not a loader of its own
        "revision": revision,
        "release_date": release_date or datetime.date.today().isoformat(),
        "languages": ["eng-Latn"],
        "n_parameters": parameter_count(folder),
        "memory_usage_mb": None,
        "max_tokens": int(config.max_length or encoder["max_position_embeddings"]),
        "embed_dim": embedding_dimension(folder, config),
        "license": license,
        "open_weights": True,
        "public_training_code": training_code,
        "public_training_data": next((url for key, url in PUBLIC_TRAINING_DATA.items() if key in data), None),
        "framework": frameworks,
        "reference": f"https://huggingface.co/{repo_id}" if repo_id else None,
        "similarity_fn_name": settings.get("similarity_fn_name", "cosine"),
        "use_instructions": False,
        "training_datasets": sorted({task for key, task in MTEB_TRAINING_TASKS.items() if key in data}),
        "adapted_from": base_model_id(arguments),
        "superseded_by": None,
        "modalities": ["text"],
    }


def write_model_meta(model_dir, repo_id: Optional[str] = None, revision: Optional[str] = None,
                     license: str = "apache-2.0", training_code: Optional[str] = None,
                     name: Optional[str] = None) -> Path:
    """Write [`model_meta_record`][csekit.publishing.mteb_meta.model_meta_record] to
    ``<model_dir>/mteb_model_meta.json`` (atomically); returns its path."""
    path = Path(model_dir) / MODEL_META_FILE
    write_json(path, model_meta_record(model_dir, repo_id, revision, license, training_code=training_code, name=name))
    return path


__all__ = ["MODEL_META_FILE", "embedding_dimension", "model_meta_record", "parameter_count", "write_model_meta"]
