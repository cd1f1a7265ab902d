"""What a csekit model folder records about itself, read as the card, the MTEB metadata and the upload read it: its
``config.json`` (without building the config), its ``eval_results.json`` and the Hub id of its base model."""

import dataclasses
import json
import re
from pathlib import Path
from typing import Optional

from ..errors import DataError
from ..loading import ARGUMENTS_FILE, LOCAL_PATHS, RESULTS_FILE, hub_id_of, local_paths
from ..methods import method_of_model_type
from ..modeling.prompts import default_prompt
from .eval_record import record_problem


def read_json(path: Path) -> dict:
    """A JSON object (a csekit record) from ``path``; anything else is a
    [`DataError`][csekit.errors.DataError]."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}: holds a JSON {type(value).__name__}, not the object csekit writes; train with a "
                        "csekit recipe or run `csekit evaluate` again")
    return value


PATHS_NOTE = ("\n> Local paths of the training run (data files, the base model's and output folders) are shown by "
              "their base name.\n")


def recorded_local_paths(folder) -> set:
    """The local paths the folder's records list (``local_paths`` of ``training_args.json`` and
    ``eval_results.json``, written by [`csekit.loading.local_paths`][csekit.loading.local_paths] where the run was)."""
    found = set()
    for name in (ARGUMENTS_FILE, RESULTS_FILE):
        path = Path(folder) / name
        recorded = read_json(path).get(LOCAL_PATHS) if path.is_file() else None
        if isinstance(recorded, list):
            found.update(item for item in recorded if isinstance(item, str))
    return found


def strip_local_paths(value, replaced: dict, recorded=()):
    """``value`` (parsed JSON) as published: every local path string (one ``recorded`` by the run, or one
    [`local_paths`][csekit.loading.local_paths] finds here) replaced by its base name (kept in ``replaced``), the
    ``local_paths`` list itself dropped; a Hub id stays as it is."""
    if isinstance(value, dict):
        return {key: strip_local_paths(item, replaced, recorded) for key, item in value.items() if key != LOCAL_PATHS}
    if isinstance(value, list):
        return [strip_local_paths(item, replaced, recorded) for item in value]
    if not isinstance(value, str):
        return value
    found = [value] if value in recorded else local_paths(value)
    for path in found:  # the whole string, or each path inside it (a command line) as it stands there
        replaced[path] = base_name(path)
        value = replaced[path] if path == value else value.replace(path, replaced[path])
    return value


def base_name(path: str) -> str:
    """The last part of a local path of any platform (``C:\\models\\bert`` → ``bert``, ``file:///x/y`` → ``y``)."""
    return re.split(r"[\\/]", path.rstrip("/\\"))[-1] or path


def load_eval_record(model_dir) -> dict:
    """The folder's ``eval_results.json``, every field checked for the shape csekit writes
    ([`record_problem`][csekit.publishing.eval_record.record_problem]): all 7 STS test scores and their average,
    finite scores, counts and a Hub id where the card and the metadata read them."""
    if not (Path(model_dir) / "config.json").is_file():
        raise DataError(f"{model_dir}: not a model folder (no config.json)")
    path = Path(model_dir) / RESULTS_FILE
    if not path.is_file():
        raise DataError(f"{path}: no such file; train with a csekit recipe or run `csekit evaluate {model_dir} "
                        f"--output {path}` first")
    record = read_json(path)
    problem = record_problem(record)
    if problem:
        raise DataError(f"{path}: {problem}; csekit writes no such record (run `csekit evaluate {model_dir} --output "
                        f"{path}` again)")
    return record


class FolderConfig:
    """A csekit folder's ``config.json`` as the card reads it, without building the config: building one resolves
    the nested backbone config through transformers' Auto classes, which load csekit's model code and transformers'
    ``modeling_utils`` (seconds of imports a card does not need). The method's settings are the fields its registered
    config class declares (read from the class, not an instance), with the values ``config.json`` holds."""

    def __init__(self, folder: Path):
        path = folder / "config.json"
        try:
            self.values = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise DataError(f"{path}: cannot read it ({error})") from None
        self.model_type = str(self.values.get("model_type", ""))
        method = method_of_model_type(self.model_type)
        if method is None or not isinstance(self.values.get("encoder_config"), dict):
            raise DataError(f"{folder}: model_type {self.model_type!r} is not a csekit model")
        self.config_class = method.config_class
        self.encoder = self.values["encoder_config"]
        self.architectures = self.values.get("architectures")
        self.pooler_type = self.values.get("pooler_type", "cls")
        self.max_length = self.values.get("max_length")
        self.sentence_transformers_settings = self.values.get("sentence_transformers_settings")
        self.default_prompt = default_prompt(self.values.get("prompt"), self.sentence_transformers_settings)
        self.bidirectional = bool(self.values.get("bidirectional"))

    def method_fields(self) -> dict:
        """The csekit fields (pooling and method settings), without the nested backbone config and the settings a
        sentence-transformers backbone handed on."""
        from ..modeling.configuration_encoder import SentenceEncoderConfig  # a config module: no model code

        names = []
        for cls in reversed(self.config_class.__mro__):
            if isinstance(cls, type) and issubclass(cls, SentenceEncoderConfig):
                names.extend(name for name in cls.__dict__.get("__annotations__", {}) if name not in names)
        fields = {item.name: item for item in dataclasses.fields(self.config_class)}
        return {name: self.values.get(name, fields[name].default if name in fields else None) for name in names
                if name not in ("encoder_config", "sentence_transformers_settings")}


def base_model_id(arguments: Optional[dict], record: Optional[dict] = None) -> Optional[str]:
    """The backbone's Hub id when the recipe started from a Hub model ([`hub_id_of`][csekit.loading.hub_id_of], recorded
    by the run in ``eval_results.json`` ``base_model``: a Hub id, the embedded all-MiniLM-L6-v2, a snapshot of the
    Hugging Face cache); a folder without a record falls back to ``model_name_or_path`` when that is a Hub id."""
    if record and "base_model" in record:
        return record["base_model"]
    name = (arguments or {}).get("model_args", {}).get("model_name_or_path")
    return hub_id_of(name) if name else None


__all__ = ["PATHS_NOTE", "FolderConfig", "base_model_id", "load_eval_record", "read_json", "recorded_local_paths",
           "strip_local_paths"]
