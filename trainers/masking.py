"""BERT's masking rule for one sentence, the step CMLM-CSE's and DiffCSE's collators share.

The rule is ``DataCollatorForLanguageModeling.torch_mask_tokens``' (Devlin et al., 2019): each non-special token is
selected with probability ``rate``; of the selected tokens 80% become the mask token, half of the rest a uniform
random token of the vocabulary, the others stay. Here it is drawn over one sentence's real tokens from that
sentence's own generator (``randomness.py``), so the same sentence gets the same masks in any batch or layout.
"""

import torch

from ..errors import DataError
from ..modeling.modeling_cmlm_cse import IGNORE_INDEX


def special_token_ids(tokenizer, method: str) -> torch.Tensor:
    """The ids masking never selects (the tokenizer's special tokens); a tokenizer without a mask token is refused in
    one line naming ``method``."""
    if tokenizer.mask_token is None:
        raise DataError(f"{type(tokenizer).__name__} has no mask token: {method} needs one")
    return torch.tensor(sorted(set(tokenizer.all_special_ids)))


def mask_tokens(tokens: torch.Tensor, rate: float, tokenizer, special_ids: torch.Tensor,
                generator: torch.Generator) -> tuple:
    """``(inputs, labels)`` of one sentence's real tokens ``(L,)``: ``inputs`` masked by BERT's 80/10/10 rule at
    ``rate``, ``labels`` the original token where one was selected and ``IGNORE_INDEX`` (-100) elsewhere."""
    def coin(probability: float) -> torch.Tensor:
        return torch.bernoulli(torch.full(tokens.shape, probability), generator=generator).bool()

    selected = coin(rate) & ~torch.isin(tokens, special_ids)
    to_mask = coin(0.8) & selected
    to_random = coin(0.5) & selected & ~to_mask
    random_words = torch.randint(len(tokenizer), tokens.shape, generator=generator)
    inputs = torch.where(to_mask, tokenizer.mask_token_id, torch.where(to_random, random_words, tokens))
    return inputs, torch.where(selected, tokens, IGNORE_INDEX)


__all__ = ["mask_tokens", "special_token_ids"]
