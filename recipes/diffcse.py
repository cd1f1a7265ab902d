"""DiffCSE training recipe (Chuang et al., 2022, "DiffCSE: Difference-based Contrastive Learning for Sentence
Embeddings"): unsupervised SimCSE plus conditional replaced-token detection by a discriminator that sees the
sentence vector.

    accelerate launch recipes/diffcse.py [--config recipes/configs/X.yaml] [--key value ...]
    accelerate launch -m csekit.recipes.diffcse [...]        (installed csekit)

Defaults are the authors' BERT-base run (voidism/DiffCSE run_diffcse.sh) where they are method settings: generator
distilbert-base-uncased, --masking_ratio 0.30, --lambda_weight 0.005, the batch-normalised projection head
(--batchnorm), [CLS] with the head in training only, temperature 0.05; their training settings (2 epochs, lr 7e-6,
batch 64) are in recipes/configs/paper/diffcse_bert_base.yaml. The generator must share the encoder's vocabulary.
The final model folder holds the encoder + pooler (+ the training head); checkpoints keep the generator, the
discriminator and its head.
"""

from csekit.methods import get_method
from csekit.recipe_run import ContrastiveRecipe, main_guard

RECIPE = ContrastiveRecipe(get_method("diffcse"), description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
