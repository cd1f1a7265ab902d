"""``csekit download``: SimCSE's published corpora and the SentEval data, from the Hugging Face Hub into the data
folder.

The files are those of the dataset repository ``princeton-nlp/datasets-for-simcse`` (what SimCSE's own download
scripts fetch):

==========  ======================  =======  =============================================
name        Hub file                size     placed at (inside the data folder)
==========  ======================  =======  =============================================
wiki1m      wiki1m_for_simcse.txt   120 MB   ``wiki/wiki1m_for_simcse.txt`` (1M sentences)
nli         nli_for_simcse.csv      49 MB    ``nli/nli_for_simcse.csv`` (275k triplets)
senteval    senteval.tar            89.8 MB  ``senteval/downstream/{STS,SICK,MR,...}``
==========  ======================  =======  =============================================

The sizes are those the Hub lists for the repository's ``main`` branch. SimCSE's
``SentEval/data/downstream/download_dataset.sh`` unpacks ``senteval.tar`` inside ``SentEval/data/downstream/``, where
SentEval reads ``downstream/STS/...``: the task folders (``STS/``, ``SICK/``, ``MR/``, ...) are the tar's top level.
[`unpack_senteval`][csekit.download.unpack_senteval] takes the shallowest folder holding ``STS/`` and ``SICK/``, so a
tar wrapped in one more
folder is read the same.

Each file goes through the Hugging Face cache (``hf_hub_download``: progress bar, resumable, ``HF_ENDPOINT``,
tokens and ``HF_HUB_OFFLINE`` honoured). huggingface_hub checks only the size of what it received, so csekit then
hashes the file and compares it with the hash the Hub published for it (the sha256 of an LFS file, the git blob id
of a small one); a mismatch removes the cached copy and fails. Only a verified file is copied (or unpacked) into a
temporary sibling of its destination and renamed into place, so an interrupted or failed download leaves the data
folder as it was.
"""

import hashlib
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tqdm.auto import tqdm

from .atomic import move_into_place, private_folder, remove_abandoned
from .data import default_data_dir
from .errors import DataError

DATA_REPO = "princeton-nlp/datasets-for-simcse"


@dataclass(frozen=True)
class Corpus:
    name: str  # csekit download NAME
    filename: str  # in the Hub repository
    target: str  # in the data folder
    size: str  # as the Hub lists it
    archive: bool = False


CORPORA = {corpus.name: corpus for corpus in (
    Corpus("wiki1m", "wiki1m_for_simcse.txt", "wiki/wiki1m_for_simcse.txt", "120 MB"),
    Corpus("nli", "nli_for_simcse.csv", "nli/nli_for_simcse.csv", "49 MB"),
    Corpus("senteval", "senteval.tar", "senteval/downstream", "89.8 MB", archive=True),
)}
# the first wiki1m sentences the quickstart trains on (recipes/configs/quickstart.yaml: max_train_samples), and
# what the benchmarks and the extraction's default averaging corpus read of the file
WIKI1M_QUICKSTART_SENTENCES = 11914
# what must be in a usable senteval/downstream folder (csekit's STS and transfer suites read these)
SENTEVAL_REQUIRED = ("STS/STSBenchmark/sts-test.csv", "SICK/SICK_test_annotated.txt", "STS/STS12-en-test")


def file_digest(path: Path, algorithm: str) -> str:
    """sha256 of the file, or (``"git"``) its git blob id: sha1 of ``b"blob <size>\\0" + content``."""
    digest = hashlib.sha256() if algorithm == "sha256" else hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def expected_hash(cached: Path, corpus: Corpus, repo_id: str, revision: Optional[str], endpoint: Optional[str]) -> str:
    """The hash the Hub published for the file: the name of its blob in the Hugging Face cache (the LFS sha256 or
    the git blob id, which is how the cache names blobs), else asked from the Hub."""
    name = cached.resolve().name
    if len(name) in (40, 64) and all(c in "0123456789abcdef" for c in name):
        return name
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint).get_paths_info(repo_id, [corpus.filename], repo_type="dataset", revision=revision)
    if not info:
        raise DataError(f"{repo_id}: the Hub lists no {corpus.filename}")
    return info[0].lfs.sha256 if info[0].lfs is not None else info[0].blob_id


def verify(cached: Path, corpus: Corpus, repo_id: str, revision: Optional[str], endpoint: Optional[str]) -> None:
    """Raise [`DataError`][csekit.download.DataError] (and drop the cached copy, so the next run downloads again)
    unless ``cached`` hashes
    to what the Hub published."""
    expected = expected_hash(cached, corpus, repo_id, revision, endpoint)
    actual = file_digest(cached, "sha256" if len(expected) == 64 else "git")
    if actual != expected:
        blob = cached.resolve()
        for path in {cached, blob}:
            path.unlink(missing_ok=True)
        raise DataError(f"{corpus.filename}: the downloaded file does not match the Hub's hash ({actual[:12]}... != "
                        f"{expected[:12]}...); the cached copy was removed, run the command again")


def fetch(corpus: Corpus, repo_id: str, revision: Optional[str], endpoint: Optional[str]) -> Path:
    """The verified file in the Hugging Face cache (downloaded when not cached)."""
    try:  # huggingface_hub's HTTP client: its transport errors surface after the retries
        from httpx2 import TransportError  # huggingface_hub 2
    except ImportError:
        from httpx import TransportError  # huggingface_hub 1
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        cached = Path(hf_hub_download(repo_id, corpus.filename, repo_type="dataset", revision=revision,
                                      endpoint=endpoint))
    except LocalEntryNotFoundError:
        reason = "HF_HUB_OFFLINE=1 is set" if constants.is_offline_mode() else "the Hub could not be reached"
        raise DataError(f"{corpus.filename}: not in the local Hugging Face cache and {reason}; `csekit download "
                        f"{corpus.name}` fetches it ({corpus.size}) on a machine that reaches the Hub") from None
    except (RepositoryNotFoundError, EntryNotFoundError):
        raise DataError(f"{repo_id}: no dataset file {corpus.filename} on the Hub") from None
    except (OSError, TransportError) as error:  # a broken transfer (reset, short read after the retries)
        raise DataError(f"{corpus.filename}: download failed ({type(error).__name__}: {error}); nothing was "
                        "written, run the command again") from None
    verify(cached, corpus, repo_id, revision, endpoint)
    return cached


def unpack_senteval(archive: Path, staging: Path) -> Path:
    """Extract SentEval's tar into ``staging`` and return the folder that holds ``STS/`` and ``SICK/`` (the tar's
    ``downstream`` contents, whatever its top-level folder is called)."""
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            for member in tqdm(members, desc="Unpacking senteval.tar", unit="file"):
                tar.extract(member, staging, filter="data")  # the 'data' filter refuses what could leave staging
    except tarfile.FilterError as error:  # a path out of the folder, a link out of it, a device or FIFO
        raise DataError(f"{archive.name}: refused member {error.tarinfo.name!r} ({error}); not SentEval's release, "
                        "nothing was placed in the data folder") from None
    except tarfile.TarError as error:
        raise DataError(f"{archive.name}: not a readable tar archive ({error}); run `csekit download senteval "
                        "--force`") from None
    candidates = [folder for folder in [staging, *staging.rglob("*")] if (folder / "STS").is_dir()
                  and (folder / "SICK").is_dir()]
    if not candidates:
        raise DataError(f"{archive.name}: no folder with STS/ and SICK/ inside; not SentEval's data")
    downstream = min(candidates, key=lambda folder: len(folder.parts))
    missing = [name for name in SENTEVAL_REQUIRED if not (downstream / name).exists()]
    if missing:
        raise DataError(f"{archive.name}: incomplete SentEval data, missing {', '.join(missing)}")
    return downstream


def download(name: str, data_dir=None, force: bool = False, repo_id: str = DATA_REPO, revision: Optional[str] = None,
             endpoint: Optional[str] = None) -> Path:
    """Download corpus ``name`` (``wiki1m``, ``nli``, ``senteval``) into the data folder; returns where it is.

    Args:
        data_dir: the data folder (default [`csekit.data.default_data_dir`][csekit.data.default_data_dir]); created if
            missing.
        force: replace what is already there.
        endpoint: a Hub endpoint other than ``HF_ENDPOINT`` (tests serve one on 127.0.0.1).
    """
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; choose from {', '.join(CORPORA)}")
    corpus = CORPORA[name]
    folder = Path(data_dir) if data_dir else default_data_dir()
    target = folder / corpus.target
    if target.exists() and not force:
        print(f"{target} already exists (--force replaces it)")
        return target
    cached = fetch(corpus, repo_id, revision, endpoint)
    parent = target.parent if not corpus.archive else folder  # senteval/downstream is placed as senteval/
    parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_abandoned(parent, f".{name}.partial-"):  # what a killed download left (a full copy)
        print(f"removed {stale}, left by an interrupted download")
    staging = private_folder(parent, f".{name}.partial-")
    try:
        if corpus.archive:
            downstream = unpack_senteval(cached, staging / "unpacked")
            ready = staging / "senteval"
            ready.mkdir()
            downstream.rename(ready / "downstream")
            final = folder / "senteval"
        else:
            ready = staging / target.name
            shutil.copyfile(cached, ready)
            final = target
        move_into_place(ready, final)  # only with force is there an old copy: it goes once the new one is in place
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


__all__ = ["CORPORA", "DATA_REPO", "WIKI1M_QUICKSTART_SENTENCES", "download"]
