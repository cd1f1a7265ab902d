"""ESimCSE training recipe (Wu et al., 2022, "ESimCSE: Enhanced Sample Building Method for Contrastive Learning of
Unsupervised Sentence Embedding"): unsupervised SimCSE whose positive is a word-repeated copy of the sentence, with
a queue of momentum-encoded negatives.

    accelerate launch recipes/esimcse.py [--config recipes/configs/X.yaml] [--key value ...]
    accelerate launch -m csekit.recipes.esimcse [...]        (installed csekit)

Defaults are the authors' BERT-base run (caskcsg/sentemb ESimCSE/run.sh): unsupervised SimCSE (wiki1m, 1 epoch,
batch 64, lr 3e-5, length 32, [CLS] + MLP in training only, temperature 0.05) with subword repetition at
--dup_rate 0.32, a queue of --queue_size 160 keys and --momentum 0.995. The final model folder holds the encoder +
pooler only; checkpoints keep the momentum encoder and its queue.

The paper's ablations are flags: --dup_rate (the repetition rate), --repetition_unit word (words instead of
subwords), --queue_size (0: without momentum contrast), --momentum.
"""

from csekit.methods import get_method
from csekit.recipe_run import ContrastiveRecipe, main_guard

RECIPE = ContrastiveRecipe(get_method("esimcse"), description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
