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

__all__ = ["DECODER_BACKBONES", "FIRST_TOKEN_POOLERS", "POOLER_TYPES"]
