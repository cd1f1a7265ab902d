"""Hard negatives for (anchor, positive) pairs, mined with an embedder and written as the triplets or n-tuples
supervised SimCSE trains on (``csekit mine``).

    csekit mine MODEL --pairs pairs.csv --output triplets.csv [--corpus FILE]
        [--num_negatives 1] [--range_min 0] [--range_max N] [--relative_margin 0.05]
        [--absolute_margin M] [--max_score S] [--sampling top|random] [--seed 42]
        [--output_format triplet|n-tuple] [--query_prompt TEXT] [--corpus_prompt TEXT]
        [--use_faiss]

The pairs are a ``sent0,sent1`` CSV (or a Hub dataset with those columns); the output is a ``sent0,sent1,hard_neg``
CSV (``--output_format triplet``) or a ``sent0,sent1,hard_neg_1,...,hard_neg_k`` one (``n-tuple``, k =
``--num_negatives``), which ``csekit train simcse --train_file`` and sentence-transformers' trainer both read.
MODEL is any embedder ``csekit evaluate`` reads (a csekit folder with its own pooling and default prompt, a
sentence-transformers folder read through sentence-transformers, a Hub id).

Each option has sentence-transformers' meaning (``sentence_transformers.util.mine_hard_negatives``, its ``triplet``
and ``n-tuple`` outputs), and with the same embeddings the same negatives come out in the same order
(tests/test_mining.py):

* candidates: the distinct positives, plus ``--corpus``; an anchor's own positives are never its negatives;
* every anchor's candidates ranked by cosine similarity, top-k in chunks of anchors, so the similarity matrix is
  never held whole (``CHUNK_ELEMENTS`` scores at a time); ``--use_faiss`` ranks them with an exact faiss index
  instead (``csekit[faiss]``; sentence-transformers' ``use_faiss``): the same negatives, except where two scores
  are within float rounding of each other (a tie, or a candidate on a filter's boundary), which faiss's other
  summation order may put the other way;
* ``--absolute_margin m`` drops a candidate scoring above (lowest positive score - m); ``--relative_margin r`` one
  scoring above (lowest positive score) - |lowest positive score| x r; ``--max_score s`` one scoring above s;
* ``--range_min``/``--range_max``: the ranks kept (default ``range_max``: as sentence-transformers derives it);
* ``--query_prompt`` / ``--corpus_prompt``: the text put before each anchor / each candidate when it is encoded,
  in place of the embedder's own default prompt (``""``: none); not given, the embedder's default prompt, as
  sentence-transformers' ``query_prompt`` / ``corpus_prompt`` (a positive is scored as a candidate: corpus prompt);
* ``--sampling top`` keeps the ``--num_negatives`` best, ``random`` draws them among the kept candidates with a
  generator seeded by ``--seed`` (sentence-transformers draws from Python's global ``random``: the same draws when it
  is seeded with the same number);
* ``triplet``: one row per (anchor, positive, negative); an anchor left with too few candidates gets fewer rows;
  ``n-tuple``: one row per (anchor, positive) with its negatives best first; an anchor left with fewer than
  ``--num_negatives`` gets none. The summary says how many anchors were short.
"""

import csv
import importlib.util
import io
import math
import random
from typing import Callable, Optional

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import DataError
from ..trainers.data import PAIR_COLUMNS, n_tuple_columns
from . import OUTPUT_FORMATS, SAMPLING

FAISS_MISSING = "--use_faiss: faiss is not installed; pip install 'csekit[faiss]' (or faiss-gpu)"
# the most similarity scores computed at once: a chunk of anchors against the whole corpus (512 MB in float32)
CHUNK_ELEMENTS = 2**27


def output_columns(output_format: str, num_negatives: int) -> tuple:
    """The columns of the mined rows, those supervised training reads: ``sent0,sent1,hard_neg``, or
    ``sent0,sent1,hard_neg_1..hard_neg_k``."""
    return PAIR_COLUMNS if output_format == "triplet" else n_tuple_columns(num_negatives)


def check_mining_options(num_negatives: int, range_min: int, range_max: Optional[int],
                         relative_margin: Optional[float], absolute_margin: Optional[float],
                         max_score: Optional[float], sampling: str, output_format: str = "triplet",
                         use_faiss: bool = False) -> None:
    """Every option's range, before anything is encoded; one line each."""
    if use_faiss and importlib.util.find_spec("faiss") is None:
        raise DataError(FAISS_MISSING)
    for name, value in (("relative_margin", relative_margin), ("absolute_margin", absolute_margin),
                        ("max_score", max_score)):
        if value is not None and not math.isfinite(value):
            raise DataError(f"--{name} {value}: must be a finite number")
    if num_negatives < 1:
        raise DataError(f"--num_negatives {num_negatives}: must be 1 or more")
    if range_min < 0:
        raise DataError(f"--range_min {range_min}: must be 0 or more")
    if range_max is not None and num_negatives > range_max - range_min:
        raise DataError(f"--num_negatives {num_negatives}: only {max(range_max - range_min, 0)} rank(s) between "
                        f"--range_min {range_min} and --range_max {range_max}")
    if relative_margin is not None and not 0 <= relative_margin <= 1:
        raise DataError(f"--relative_margin {relative_margin}: must be in [0, 1] (a share of the positive's score)")
    if absolute_margin is not None and not 0 <= absolute_margin <= 2:
        raise DataError(f"--absolute_margin {absolute_margin}: must be in [0, 2] (cosine similarities differ by at "
                        "most 2)")
    if max_score is not None and not -1 <= max_score <= 1:
        raise DataError(f"--max_score {max_score}: must be in [-1, 1] (a cosine similarity)")
    if sampling not in SAMPLING:
        raise DataError(f"--sampling {sampling!r}: choose {' or '.join(SAMPLING)}")
    if output_format not in OUTPUT_FORMATS:
        raise DataError(f"--output_format {output_format!r}: choose {' or '.join(OUTPUT_FORMATS)}")


def check_candidates(candidates: list, num_negatives: int) -> None:
    """Enough distinct candidate texts for ``num_negatives`` besides an anchor's positive."""
    if len(set(candidates)) - 1 < num_negatives:
        raise DataError(f"--num_negatives {num_negatives}: the candidates (positives and --corpus) hold "
                        f"{len(set(candidates))} distinct text(s), too few to give each anchor {num_negatives} other "
                        "than its positive")


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarities of the rows of ``a`` and ``b``, ``(len(a), len(b))``."""
    return torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T


def faiss_search(corpus: torch.Tensor) -> Callable:
    """``search(queries, k) -> (scores, indices)``: an exact inner-product faiss index (``IndexFlatIP``, as
    sentence-transformers' ``use_faiss`` builds) over the unit vectors ``corpus``; one line without faiss."""
    try:
        import faiss
    except ImportError:
        raise DataError(FAISS_MISSING) from None
    index = faiss.IndexFlatIP(corpus.shape[1])
    index.add(np.ascontiguousarray(corpus.numpy(), dtype=np.float32))

    def search(queries: torch.Tensor, k: int) -> tuple:
        scores, indices = index.search(np.ascontiguousarray(queries.numpy(), dtype=np.float32), k)
        return torch.from_numpy(scores), torch.from_numpy(indices)

    return search


def top_candidates(queries: torch.Tensor, corpus: torch.Tensor, k: int, progress: bool,
                   use_faiss: bool = False) -> tuple:
    """``(scores, indices)`` of the ``k`` most similar corpus rows of every query, ``(len(queries), k)``, computed
    in chunks of queries (by matrix products, or a faiss index with ``use_faiss``); columns beyond the corpus are
    ``-inf`` scores at index ``-1``."""
    chunk = max(1, CHUNK_ELEMENTS // max(len(corpus), 1))
    search = faiss_search(corpus) if use_faiss else (lambda part, k: tuple(torch.topk(cosine(part, corpus), k, dim=1)))
    parts = [search(queries[start:start + chunk], min(k, len(corpus)))
             for start in tqdm(range(0, len(queries), chunk), desc="Ranking candidates", disable=not progress)]
    scores, indices = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    missing = k - scores.shape[1]
    if missing > 0:
        scores = torch.cat([scores, scores.new_full((len(scores), missing), -float("inf"))], dim=1)
        indices = torch.cat([indices, indices.new_full((len(indices), missing), -1)], dim=1)
    return scores, indices


def drop_too_similar(scores: torch.Tensor, lowest_positive: torch.Tensor, relative_margin, absolute_margin,
                     max_score) -> dict:
    """Set to ``-inf``, in place, the candidates the false-negative filters drop (each comparison written as
    sentence-transformers writes it, so a score on the boundary falls the same side); returns how many each
    dropped."""
    removed = {}
    if absolute_margin is not None:
        removed["absolute_margin"] = scores + absolute_margin > lowest_positive[:, None]
    if relative_margin is not None:
        removed["relative_margin"] = scores > (lowest_positive - lowest_positive.abs() * relative_margin)[:, None]
    if max_score is not None:
        removed["max_score"] = scores > max_score
    dropped = {}
    for name, mask in removed.items():
        mask = mask & ~scores.isinf()  # (a filter before it may have dropped the same candidate)
        dropped[name] = int(mask.sum())
        scores[mask] = -float("inf")
    return dropped


def own_positives(anchors: list, positives: list, candidates: list) -> tuple:
    """``(queries, own)``: the distinct anchors in file order, and each one's distinct positives as candidate rows,
    in file order."""
    queries = list(dict.fromkeys(anchors))
    row_of_query, row_of_text = {q: i for i, q in enumerate(queries)}, {t: i for i, t in enumerate(candidates)}
    own = [[] for _ in queries]
    for anchor, positive in zip(anchors, positives):
        if row_of_text[positive] not in own[row_of_query[anchor]]:
            own[row_of_query[anchor]].append(row_of_text[positive])
    return queries, own


def picked_columns(scores: torch.Tensor, num_negatives: int, sampling: str, seed: int) -> list:
    """For each query, the columns of its ranked candidates taken as negatives, best first: the first
    ``num_negatives``, or as many drawn among the kept (finite) ones by a generator seeded with ``seed``."""
    if sampling == "top":
        chosen = [list(range(num_negatives))] * len(scores)
    else:
        draws = random.Random(seed)
        available = (scores.shape[1] - scores.isinf().sum(1)).clamp(min=num_negatives)
        chosen = [draws.sample(range(int(n)), k=num_negatives) for n in available]
    return [sorted(columns, key=lambda column: -float(scores[i, column]))  # a stable sort
            for i, columns in enumerate(chosen)]


def ranked_candidates(queries: list, candidates: list, own: list, embed: Callable, k: int, filters: dict,
                      progress: bool, prompts: tuple = (None, None), use_faiss: bool = False) -> tuple:
    """``(scores, indices, dropped)``: each query's ``k`` best candidates by cosine similarity, its own positives
    and the candidates ``filters`` (``drop_too_similar``'s) drop scored ``-inf``, and how many each filter dropped.
    ``prompts``: the (query, corpus) prompts ``embed`` is given (``None``: the embedder's own)."""
    unit = torch.nn.functional.normalize
    corpus_vectors, query_vectors = (  # unit vectors, as sentence-transformers encodes for mining
        unit(torch.as_tensor(np.asarray(embed(texts) if prompt is None else embed(texts, prompt)),
                             dtype=torch.float32), dim=1)
        for texts, prompt in ((candidates, prompts[1]), (queries, prompts[0])))
    scores, indices = top_candidates(query_vectors, corpus_vectors, k, progress, use_faiss)
    scores[indices == -1] = -float("inf")
    lowest = []
    for i, rows in enumerate(own):
        scores[i, torch.isin(indices[i], torch.tensor(rows))] = -float("inf")
        lowest.append((unit(query_vectors[i:i + 1], dim=1) * unit(corpus_vectors[rows], dim=1)).sum(-1).min())
    dropped = drop_too_similar(scores, torch.stack(lowest), **filters)
    return scores, indices, dropped


def mine_hard_negatives(anchors: list, positives: list, embed: Callable, corpus: Optional[list] = None,
                        num_negatives: int = 1, range_min: int = 0, range_max: Optional[int] = None,
                        relative_margin: Optional[float] = None, absolute_margin: Optional[float] = None,
                        max_score: Optional[float] = None, sampling: str = "top", seed: int = 42,
                        progress: bool = True, output_format: str = "triplet", query_prompt: Optional[str] = None,
                        corpus_prompt: Optional[str] = None, use_faiss: bool = False) -> tuple:
    """``(columns, summary)``: ``columns`` ``{"sent0": [...], "sent1": [...], "hard_neg": [...]}`` with one row per
    (anchor, positive, negative) (``n-tuple``: ``hard_neg_1``... with one row per (anchor, positive)), and
    ``summary`` the counts the command prints. ``embed(texts) -> (n, d)`` array is the embedder
    (``csekit.evaluation.encoders.load_embedder``), called as ``embed(texts, prompt)`` where a prompt is given. The
    options are the module docstring's."""
    filters = {"relative_margin": relative_margin, "absolute_margin": absolute_margin, "max_score": max_score}
    check_mining_options(num_negatives, range_min, range_max, sampling=sampling, output_format=output_format,
                         use_faiss=use_faiss, **filters)
    candidates = list(dict.fromkeys((corpus or []) + list(positives)))
    queries, own = own_positives(anchors, positives, candidates)
    most = max(len(rows) for rows in own)
    if range_max is None:  # as sentence-transformers derives it: room for the filters, and for the positives
        filtered = any(value is not None for value in filters.values())
        range_max = range_min + num_negatives * (10 if filtered else 1) + most
    check_mining_options(num_negatives, range_min, range_max, sampling=sampling, **filters)
    check_candidates(candidates, num_negatives)
    scores, indices, dropped = ranked_candidates(queries, candidates, own, embed, range_max + most, filters, progress,
                                                 (query_prompt, corpus_prompt), use_faiss)
    scores, order = torch.topk(scores, k=range_max, dim=1)
    indices, scores = indices.gather(1, order)[:, range_min:], scores[:, range_min:]
    columns, short = {name: [] for name in output_columns(output_format, num_negatives)}, 0
    for i, picked in enumerate(picked_columns(scores, num_negatives, sampling, seed)):
        negatives = [candidates[int(indices[i, c])] for c in picked if not torch.isinf(scores[i, c])]
        short += len(negatives) < num_negatives
        if output_format == "triplet":
            rows = [(row, [negative]) for row in own[i] for negative in negatives]
        else:  # one row per positive, and none short of negatives
            rows = [(row, negatives) for row in own[i]] if len(negatives) == num_negatives else []
        for row, kept in rows:
            for name, text in zip(columns, [queries[i], candidates[row], *kept]):
                columns[name].append(text)
    summary = {"anchors": len(queries), "candidates": len(candidates), "rows": len(columns["sent0"]),
               "range_max": range_max, "dropped": dropped, "anchors_short": short}
    return columns, summary


def mined_csv(columns: dict) -> str:
    """The mined rows as a CSV with the columns' header (``sent0,sent1,hard_neg`` or the n-tuple's), as csekit's
    supervised training reads it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(zip(*columns.values()))
    return out.getvalue()


__all__ = ["check_candidates", "check_mining_options", "mine_hard_negatives", "mined_csv", "output_columns"]
