"""What a score compares: the protocol record kept with every result (``eval_results.json`` ``"protocol"``, the
model card), and the check that two results were measured the same way.

    {"pooler": "cls",
     "sts": {"aggregation": "all",
             "tasks": {"STS12": {"pairs": 3108, "sha256": "..."}, ...}},
     "transfer": {"protocol": "senteval", "max_train": null,
                  "tasks": {"MR": {"train": 10662, ..., "sha256": ...}}},
     "versions": {"csekit": "0.1.0", "torch": "2.13.0", ...}}

The hashes are over the pairs / examples as scored (sentences, gold scores, labels, in order), so two data folders
with the same content agree whatever their paths, and an edited or truncated file does not.
"""

import hashlib
from importlib.metadata import PackageNotFoundError, version
from typing import Optional

TRANSFER_PROTOCOLS = ("senteval", "simcse", "fast")  # csekit.evaluation.transfer's protocols (module docstring)

LIBRARIES = ("csekit", "torch", "transformers", "sentence-transformers", "mteb", "scikit-learn", "scipy", "numpy")


def content_hash(*columns) -> str:
    """sha256 (first 16 hex digits) over columns of values, each value length-prefixed."""
    digest = hashlib.sha256()
    for column in columns:
        for value in column:
            encoded = repr(value).encode("utf-8")
            digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()[:16]


def library_versions() -> dict:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    return versions


def protocol_record(pooler: Optional[str], sts=None, transfer=None) -> dict:
    """The record of one evaluation: ``sts`` an [`STSEvaluator`][csekit.evaluation.sts.STSEvaluator], ``transfer`` a
    [`TransferEvaluator`][csekit.evaluation.transfer.TransferEvaluator] (each optional)."""
    record = {"pooler": pooler}
    if sts is not None:
        record["sts"] = sts.fingerprint()
    if transfer is not None:
        record["transfer"] = transfer.fingerprint()
    record["versions"] = library_versions()
    return record


def _flatten(value, prefix="") -> dict:
    if isinstance(value, dict):
        return {key: item for name, inner in value.items() for key, item in _flatten(inner, f"{prefix}{name}.").items()}
    return {prefix.rstrip("."): value}


def protocol_differences(first: Optional[dict], second: Optional[dict]) -> list:
    """``["sts.aggregation: all != mean", ...]`` for the fields the two records set differently (a task or suite
    only one of them scored is not a difference); ``["no protocol record"]`` when either lacks one."""
    if not first or not second:
        return ["no protocol record"]
    a, b = _flatten(first), _flatten(second)
    return [f"{key}: {a[key]} != {b[key]}" for key in sorted(set(a) & set(b)) if a[key] != b[key]]


__all__ = ["TRANSFER_PROTOCOLS", "content_hash", "library_versions", "protocol_differences", "protocol_record"]
