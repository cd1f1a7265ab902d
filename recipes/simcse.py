"""SimCSE training recipe (Gao et al., 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings").

    accelerate launch recipes/simcse.py [--config recipes/configs/X.yaml] [--key value ...]
    accelerate launch -m csekit.recipes.simcse [...]        (installed csekit)

Defaults are the paper's unsupervised setting: bert-base-uncased, wiki1m, 1 epoch, batch 64, lr 3e-5, max length
32, temperature 0.05, [CLS] pooler with the MLP in training only, STS-B dev every 125 steps, best checkpoint kept.
A .csv train file (sent0,sent1[,hard_neg]) switches to supervised SimCSE.
"""

from csekit.methods import get_method
from csekit.recipe_run import ContrastiveRecipe, main_guard

RECIPE = ContrastiveRecipe(get_method("simcse"), description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
