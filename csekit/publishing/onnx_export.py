"""``csekit export-onnx MODEL OUT``: one ONNX graph from token ids and attention mask to the sentence vector.

The graph is the folder's whole sentence-transformers pipeline (backbone, pooling, the Dense head, Normalize when the
model normalises), traced by ``torch.onnx.export`` (its ``dynamo`` exporter, with a dynamic batch and sequence
length), so an ONNX runtime needs no pooling code of its own. Layout of ``OUT``::

    model.onnx        input_ids, attention_mask (int64, batch x sequence)
                      -> sentence_embedding (batch x d)
    tokenizer files   the model's tokenizer (truncate at ``max_length`` below)
    onnx_export.json  source, dimension, max_length, normalize, quantize, opset,
                      the export's check

``--quantize int8`` stores the weights of the linear layers as int8 with one scale per output channel (onnxruntime's
dynamic quantisation, ``INT8_SETTINGS``: the activations are quantised per tensor at run time, so a sentence's
vector depends a little on the batch it is encoded in). The settings were chosen by measurement
(``benchmarks/onnx_int8.py``): one scale per channel instead of one per matrix brings the int8 vectors' lowest cosine
to float32 from 0.89 to 0.99 on all-MiniLM-L6-v2 at the same speed; static (calibrated) activation scales remove the
batch dependence but are slower than float32 here, and onnxruntime's transformer fusions change neither. The export
encodes probe sentences with the exported graph and with sentence-transformers: a float32 graph that differs by more
than ``TOLERANCE`` is refused and nothing is written; an int8 graph whose lowest cosine falls under
``INT8_MIN_COSINE`` is refused too; otherwise its differences are recorded, with the lowest cosine between each
sentence encoded alone and in its batch (quantisation changes the vectors by design). ``csekit evaluate
OUT --backend onnx`` scores the exported folder as it is served.
"""

import contextlib
import json
import warnings
from pathlib import Path
from typing import Optional

import numpy as np

from ..atomic import staged_folder, work_folder, write_json
from ..errors import DataError
from ..loading import resolve_model_path
from ..preflight import check_output_dir, is_csekit_model
from .st_export import PROBE_SENTENCES

GRAPH_FILE = "model.onnx"
EXPORT_RECORD = "onnx_export.json"
QUANTIZATIONS = ("int8",)
OPSET = 18
TOLERANCE = 1e-5
INPUTS = ("input_ids", "attention_mask")
CHECK_SENTENCES = 200
# onnxruntime quantize_dynamic's settings for --quantize int8 (chosen by benchmarks/onnx_int8.py)
INT8_SETTINGS = {"weight_type": "QInt8", "per_channel": True}
INT8_MIN_COSINE = 0.95  # an int8 graph farther than this from float32 on a probe sentence is not shipped


def check_sentences(count: int = CHECK_SENTENCES) -> list:
    """``count`` deterministic sentences of varied length (3 to about 300 words, past most models' maximum, so the
    truncation is checked too), built from the probe sentences' words: what the export is checked on."""
    words = " ".join(PROBE_SENTENCES).split()
    return [" ".join(words[(index * 7 + offset) % len(words)] for offset in range(3 + (index * 37) % 300))
            for index in range(count)]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two ``(n, d)`` arrays."""
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def require_modules(command: str, modules: tuple) -> None:
    """One line naming the extra to install when an optional library of ``command`` is missing."""
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            raise DataError(f"{command} needs {module}: pip install 'csekit[onnx]'") from None


def sentence_vector_module(model):
    """A ``torch.nn.Module`` ``(input_ids, attention_mask) -> sentence vectors`` running ``model`` (a
    ``SentenceTransformer``) exactly as its ``encode`` does, less tokenisation and batching."""
    import torch

    class SentenceVectors(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model({"input_ids": input_ids, "attention_mask": attention_mask})["sentence_embedding"]

    return SentenceVectors().eval()


def load_sentence_transformer(model: str):
    """The folder (or Hub id) as a ``SentenceTransformer`` on CPU in float32; refused in one line when it has no
    sentence-transformers modules (its pooling is not recorded, so a graph would have to guess it)."""
    from sentence_transformers import SentenceTransformer

    path = Path(resolve_model_path(model))
    if not (path / "modules.json").is_file():
        reason = ("its inference (a multi-layer pooler or whitening) is not sentence-transformers modules"
                  if is_csekit_model(path)
                  else "its pooling is not recorded")
        raise DataError(f"{model}: no sentence-transformers modules (modules.json): {reason}; export-onnx exports "
                        "a folder SentenceTransformer loads as it is")
    return SentenceTransformer(str(path), device="cpu", local_files_only=True).float().eval()


def onnx_vectors(session, tokenizer, sentences: list, max_length: Optional[int], batch_size: int = 64) -> np.ndarray:
    """``(len(sentences), d)`` float32 vectors from an onnxruntime ``session`` of an exported graph, in batches
    sorted by length (padding changes nothing: the graph masks it), in the input order."""
    order = np.argsort([-len(sentence) for sentence in sentences], kind="stable")
    vectors = [None] * len(sentences)
    for start in range(0, len(sentences), batch_size):
        rows = order[start:start + batch_size]
        tokens = tokenizer([sentences[row] for row in rows], padding=True, truncation=max_length is not None,
                           max_length=max_length, return_tensors="np")
        feed = {name: tokens[name].astype(np.int64) for name in INPUTS}
        for row, vector in zip(rows, session.run(None, feed)[0]):
            vectors[row] = vector
    return np.asarray(vectors, dtype=np.float32).reshape(len(sentences), -1)


@contextlib.contextmanager
def quiet_exporter():
    """torch.onnx's exporter logs its internals (registrations it skips, shape renames) as warnings; they say
    nothing about the user's model, whose graph is checked after the export instead."""
    import logging

    # (onnxruntime's quantiser advises, on the root logger, a shape-inference pre-pass that fails on these graphs)
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"torch\.(onnx|export|_export|fx)")
        warnings.filterwarnings("ignore", module="onnxscript")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def inference_session(path: Path):
    """An onnxruntime session of the graph at ``path``; a file onnxruntime cannot read (truncated, damaged, not a
    graph) is one line."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # onnxruntime's own warnings about unused initialisers are not the user's
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own exception types (InvalidProtobuf, Fail, ...) derive from it
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise DataError(f"{path}: onnxruntime cannot load this graph ({reason}); export it again with "
                        "`csekit export-onnx`") from None


def truncate_shipped_tokenizer(path: Path, max_length: Optional[int]) -> None:
    """Set truncation at ``max_length`` in the exported ``tokenizer.json``, so a runtime that uses the file as shipped
    (``tokenizers`` + onnxruntime, without csekit or transformers) feeds the graph what ``encode`` feeds the model."""
    if max_length is None or not path.is_file():
        return
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.save(str(path))


def written_opset(path: Path) -> int:
    """The ONNX (default-domain) opset the graph file at ``path`` declares."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))


def export_onnx(model: str, out_dir, quantize: Optional[str] = None, opset: int = OPSET,
                overwrite: bool = False) -> dict:
    """Write ``out_dir`` (see the module docstring); returns its ``onnx_export.json`` record."""
    import torch

    if quantize is not None and quantize not in QUANTIZATIONS:
        raise DataError(f"--quantize {quantize}: choose one of {', '.join(QUANTIZATIONS)}")
    out_dir = check_output_dir(out_dir, "OUT", inputs=[model, resolve_model_path(str(model))])
    if out_dir.exists() and not overwrite:
        raise DataError(f"{out_dir} already exists (pass --overwrite to replace it)")
    st = load_sentence_transformer(str(model))
    if getattr(st, "default_prompt_name", None):  # sentence-transformers prepends it; the graph sees tokens only
        raise DataError(f"{model}: its default prompt {st.prompts.get(st.default_prompt_name)!r}, which the ONNX graph "
                        "(run on tokenized text) cannot prepend; nothing was written")
    max_length = st.max_seq_length
    probe = check_sentences()
    expected = st.encode(probe, convert_to_numpy=True, batch_size=32)
    tokens = st.tokenizer(probe[:2], padding=True, return_tensors="pt")
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with work_folder(out_dir) as work, staged_folder(out_dir, replace=overwrite, flag="OUT") as staged:
        graph = Path(work) / GRAPH_FILE
        with torch.no_grad(), quiet_exporter():
            program = torch.onnx.export(
                sentence_vector_module(st), (tokens["input_ids"], tokens["attention_mask"]), dynamo=True,
                input_names=list(INPUTS), output_names=["sentence_embedding"], opset_version=opset,
                dynamic_shapes=({0: batch, 1: sequence}, {0: batch, 1: sequence}), verbose=False)
        program.save(str(graph))
        written = written_opset(graph)
        if written != opset:  # the exporter writes the opsets it implements, whatever it was asked for
            raise DataError(f"--opset {opset}: torch's exporter wrote opset {written} for this model; give --opset "
                            f"{written} (nothing was written)")
        if quantize == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            settings = {**INT8_SETTINGS, "weight_type": QuantType[INT8_SETTINGS["weight_type"]]}
            with quiet_exporter():
                quantize_dynamic(str(graph), str(staged / GRAPH_FILE), **settings)
        else:
            graph.replace(staged / GRAPH_FILE)
        st.tokenizer.save_pretrained(str(staged))
        truncate_shipped_tokenizer(staged / "tokenizer.json", max_length)
        session = inference_session(staged / GRAPH_FILE)
        actual = onnx_vectors(session, st.tokenizer, probe, max_length)
        if actual.shape != expected.shape:
            raise DataError(f"export check failed: the ONNX graph returns {actual.shape[1:]} vectors, "
                            f"SentenceTransformer.encode {expected.shape[1:]}; nothing was written")
        difference = float(np.abs(actual - expected).max())
        cosine = cosines(actual, expected)
        if quantize is None and not difference <= TOLERANCE:
            raise DataError(f"export check failed: the ONNX graph's vectors differ from SentenceTransformer.encode "
                            f"by {difference:.2e} (> {TOLERANCE:g}); nothing was written")
        if quantize is not None and not cosine.min() >= INT8_MIN_COSINE:
            raise DataError(f"export check failed: {quantize} moves this model's vectors too far (lowest cosine to "
                            f"SentenceTransformer.encode {cosine.min():.3f} < {INT8_MIN_COSINE}); export float32 "
                            "(nothing was written)")
        check = {"sentences": len(probe), "max_abs_difference": difference,
                 "min_cosine": round(float(cosine.min()), 6), "mean_cosine": round(float(cosine.mean()), 6)}
        if quantize is not None:  # each sentence alone against the same sentence in its batch of 64
            alone = onnx_vectors(session, st.tokenizer, probe, max_length, batch_size=1)
            check["batch_min_cosine"] = round(float(cosines(alone, actual).min()), 6)
            check["settings"] = INT8_SETTINGS
        normalize = any(type(module).__name__ == "Normalize" for module in st)
        record = {"source": str(model), "dimension": int(expected.shape[1]), "max_length": max_length,
                  "normalize": normalize, "quantize": quantize, "opset": opset, "inputs": list(INPUTS),
                  "output": "sentence_embedding", "check": check}
        write_json(staged / EXPORT_RECORD, record)
    return {**record, "out_dir": str(out_dir)}


def read_export_record(folder) -> dict:
    """``onnx_export.json`` of an exported folder, or one line naming what is missing."""
    folder = Path(folder)
    record, graph = folder / EXPORT_RECORD, folder / GRAPH_FILE
    if not graph.is_file() or not record.is_file():
        raise DataError(f"{folder}: not an ONNX export (needs {GRAPH_FILE} and {EXPORT_RECORD}; write one with "
                        "`csekit export-onnx MODEL OUT`)")
    try:
        return json.loads(record.read_text())
    except ValueError as error:
        raise DataError(f"{record}: not JSON ({error})") from None


def load_onnx_embedder(folder, batch_size: int = 64, max_length: Optional[int] = None):
    """``(embed, info)`` for ``csekit evaluate --backend onnx``: ``embed(sentences) -> (n, d)`` from the exported
    graph through onnxruntime, truncating at the export's ``max_length`` (or ``max_length``)."""
    from transformers import AutoTokenizer

    require_modules("--backend onnx", ("onnxruntime",))
    record = read_export_record(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    session = inference_session(Path(folder) / GRAPH_FILE)
    length = max_length or record.get("max_length")

    def embed(sentences, prompt=None):
        if prompt:
            raise DataError(f"{folder}: an ONNX export runs its graph on tokenized text and cannot prepend the prompt "
                            f"{prompt!r}")
        return onnx_vectors(session, tokenizer, list(sentences), length, batch_size)

    info = {"model": str(folder), "pooler": "onnx graph", "backend": "onnx", "dimension": record["dimension"],
            "quantize": record.get("quantize")}
    return embed, info


__all__ = ["EXPORT_RECORD", "GRAPH_FILE", "INT8_MIN_COSINE", "INT8_SETTINGS", "QUANTIZATIONS", "export_onnx",
           "load_onnx_embedder", "onnx_vectors", "read_export_record", "require_modules", "sentence_vector_module"]
