"""WhitenedCSE training recipe (Zhuo et al., 2023, "WhitenedCSE: Whitening-based Contrastive Learning of Sentence
Embeddings").

    accelerate launch recipes/whitenedcse.py [--config recipes/configs/X.yaml] [--key value ...]
    accelerate launch -m csekit.recipes.whitenedcse [...]   (installed csekit)

Defaults are the paper's bert-base setting (see WhitenedCSEConfig): SimCSE's unsupervised training (wiki1m, 1 epoch,
batch 64, lr 3e-5, max length 32, temperature 0.05, [CLS]) with shuffled group whitening in k = 384 groups of 2
channels (256 groups for RoBERTa; hidden / 2 groups where the paper's k does not fit, e.g. MiniLM) and 3 views
(2 positives per anchor, weights 1 and 1). Whitening groups at least as wide as the per-process batch are refused.
The paper's ablations are flags:

* Table 3: --whitening none|pca|zca|group|shuffled_group
* Table 4: the number of whitening groups (--num_groups) with --whitening shuffled_group or group (w/o shuffle)
* Table 5: paper positive number 2..5 = --num_positives 1..4
* loss: --loss_type L1|L2, --positive_weights (one per positive, e.g. 1 0.8); also --positive_source,
  --whitening_gradient, --inference_representation.
"""

from csekit.methods import get_method
from csekit.recipe_run import ContrastiveRecipe, main_guard

RECIPE = ContrastiveRecipe(get_method("whitenedcse"), description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
