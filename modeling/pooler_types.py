"""The pooler names every csekit model, ``csekit evaluate --pooler`` and the recipes accept, and the decoder families
they meet. The module imports nothing, so the command line lists them without loading torch."""

POOLER_TYPES = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "layers", "last_token",
                "weighted_avg")
# poolers that read the first token: a causal decoder computes it from itself alone, so it says nothing of the rest
FIRST_TOKEN_POOLERS = ("cls", "cls_before_pooler")
# the decoder-only (causal) families csekit trains and evaluates (model_type: what docs/training.md's table calls
# it), each covered by tests/test_decoders.py on a tiny random config
DECODER_BACKBONES = {
    "qwen2": "Qwen2, Qwen2.5 (gte-Qwen2)", "qwen3": "Qwen3 (Qwen3-Embedding)", "llama": "Llama",
    "mistral": "Mistral (e5-mistral, SFR-Embedding)", "gemma": "Gemma",
}


def causal_pooler_problem(family: str, pooler_type, bidirectional: bool = False):
    """Why ``pooler_type`` pools nothing of a sentence on a ``family`` backbone, or ``None``: on a causal decoder,
    the first-token poolers (and no pooler, read as ``cls``) see the first token alone. A bidirectional one
    (``bidirectional``) sees the whole sentence there, as an encoder does."""
    if family not in DECODER_BACKBONES or bidirectional or pooler_type not in FIRST_TOKEN_POOLERS + (None,):
        return None
    return (f"a decoder ({family!r}, causal attention) computes its first token from itself alone; "
            "use last_token, weighted_avg or avg")


__all__ = ["DECODER_BACKBONES", "FIRST_TOKEN_POOLERS", "POOLER_TYPES", "causal_pooler_problem"]
