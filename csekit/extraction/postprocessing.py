"""Post-processing of sentence embeddings (Stankevičius & Lukoševičius 2024, Section 3.4).

Every step is fitted on a set of embeddings and then applied to the target embeddings:

==================  ========================================================================================
``zscore``          subtract the per-dimension mean, divide by the per-dimension standard deviation
``quantile-u``      per-dimension quantile normalisation to a uniform distribution (scikit-learn)
``whiten``          centre and rotate/scale so the covariance becomes the identity (PCA whitening)
``abtt-D``          all-but-the-top: centre and remove the projection on the top ``D`` principal components
``normalize``       scale every vector to unit L2 norm (nothing to fit)
==================  ========================================================================================

A step fitted on the target texts themselves is written plainly; a trailing ``^W`` (the paper's superscript W) fits
it on a reference corpus instead (WikiText-2 here). Steps chain with ``+``, applied left to right::

    chain = parse_postprocessing("quantile-u^W+normalize")
    vectors = chain.fit_transform(target_embeddings, reference=wiki_embeddings)

When a chain has a ``^W`` step, the reference embeddings pass through the earlier steps too, so each step is
fitted on data in the same space it is applied to.
"""

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
from sklearn.decomposition import PCA
from sklearn.preprocessing import QuantileTransformer, StandardScaler, normalize

from ..errors import DataError
from .settings import STEP_NAMES

REFERENCE_SUFFIX = "^W"
NO_POSTPROCESSING = "none"


class Whitening:
    """PCA whitening: ``(x - mean) @ W`` with ``W = U diag(1 / sqrt(s))`` from the covariance ``U diag(s) U^T``.

    The fitted data gets an identity covariance (``ddof=0``). Components with zero variance are dropped (rank-deficient
    data, e.g. fewer texts than dimensions), so the output may have fewer dimensions than the input.
    """

    def fit(self, x: np.ndarray) -> "Whitening":
        self.mean_ = x.mean(0)
        covariance = np.cov(x - self.mean_, rowvar=False, bias=True)
        eigenvalues, eigenvectors = np.linalg.eigh(covariance)
        keep = eigenvalues > eigenvalues.max() * 1e-10
        self.components_ = eigenvectors[:, keep] / np.sqrt(eigenvalues[keep])
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean_) @ self.components_


class AllButTheTop:
    """All-but-the-top (Mu & Viswanath 2018) on sentence vectors: centre, remove the top ``d`` principal components.

    ``A' = Ã - (Ã U^T) U`` with ``Ã`` the centred data and ``U`` the ``(d, hidden)`` top components (paper eq. 6-7).
    """

    def __init__(self, components: int):
        self.components = components

    def fit(self, x: np.ndarray) -> "AllButTheTop":
        self.mean_ = x.mean(0)
        self.top_ = PCA(n_components=self.components, svd_solver="full").fit(x).components_
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        centred = x - self.mean_
        return centred - (centred @ self.top_.T) @ self.top_


class UnitNormalize:
    """Scale each vector to unit L2 norm; stateless, so ``fit`` is a no-op."""

    def fit(self, x: np.ndarray) -> "UnitNormalize":
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        return normalize(x)


def build_step(name: str):
    """A fresh, unfitted transformer for one step name (without the ``^W`` suffix)."""
    if name == "zscore":
        return StandardScaler()
    if name == "quantile-u":
        # subsample=None: use every vector for the quantiles (scikit-learn subsamples 10k by default)
        return QuantileTransformer(output_distribution="uniform", n_quantiles=1000, subsample=None)
    if name == "whiten":
        return Whitening()
    if name == "normalize":
        return UnitNormalize()
    match = re.fullmatch(r"abtt-(\d+)", name)
    if match and int(match.group(1)) >= 1:
        return AllButTheTop(int(match.group(1)))
    raise DataError(
        f"unknown post-processing step {name!r}; choose from {', '.join(STEP_NAMES)} (D >= 1), optionally with "
        f"{REFERENCE_SUFFIX} to fit on the reference corpus, chained with '+', or {NO_POSTPROCESSING!r}"
    )


@dataclass
class PostProcessingStep:
    name: str
    on_reference: bool

    def __str__(self):
        return self.name + (REFERENCE_SUFFIX if self.on_reference else "")


class PostProcessingChain:
    """Steps applied left to right; each is fitted on the target embeddings or (``^W``) the reference embeddings."""

    def __init__(self, steps: list):
        self.steps = steps

    @property
    def needs_reference(self) -> bool:
        return any(step.on_reference for step in self.steps)

    def __str__(self):
        return "+".join(str(step) for step in self.steps) or NO_POSTPROCESSING

    def fit_transform(
        self, target: np.ndarray, reference: Optional[np.ndarray] = None, fit: Optional[np.ndarray] = None
    ) -> np.ndarray:
        """Fit every step and return the transformed ``(n, d)`` target embeddings (float64).

        Steps without ``^W`` are fitted on ``fit`` (the fit set; default ``target`` itself), ``^W`` steps on
        ``reference``; every set passes through the earlier steps, so each step is fitted in the space it is
        applied to.
        """
        if self.needs_reference and reference is None:
            raise DataError(f"post-processing {self} fits on the reference corpus, but no reference embeddings given")
        target = np.asarray(target, dtype=np.float64)
        fit = None if fit is None else np.asarray(fit, dtype=np.float64)
        reference = None if reference is None else np.asarray(reference, dtype=np.float64)
        for step in self.steps:
            on = reference if step.on_reference else (target if fit is None else fit)
            transformer = build_step(step.name).fit(on)
            target = transformer.transform(target)
            fit = None if fit is None else transformer.transform(fit)
            if reference is not None:
                reference = transformer.transform(reference)
        return target


def parse_postprocessing(spec: str) -> PostProcessingChain:
    """``"zscore"``, ``"quantile-u^W+normalize"``, ``"none"`` -> a `PostProcessingChain` (validated)."""
    spec = spec.strip()
    if spec in ("", NO_POSTPROCESSING):
        return PostProcessingChain([])
    steps = []
    for part in spec.split("+"):
        part = part.strip()
        on_reference = part.endswith(REFERENCE_SUFFIX)
        name = part[: -len(REFERENCE_SUFFIX)] if on_reference else part
        build_step(name)  # validates the name now, not halfway through a grid
        steps.append(PostProcessingStep(name, on_reference))
    return PostProcessingChain(steps)


__all__ = ["AllButTheTop", "PostProcessingChain", "UnitNormalize", "Whitening", "parse_postprocessing"]
