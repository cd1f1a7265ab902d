"""CLSR training recipe (Qiu, Ding & Chen): a contrastive MLP head on a frozen pretrained encoder.

    accelerate launch recipes/clsr.py [--config recipes/configs/X.yaml] [--key value ...]
    python -m csekit.recipes.clsr [...]                     (installed csekit)

Steps: pool every training sentence once with the frozen encoder (cached on disk, keyed by model + pooling +
data), train the MLP encoder ``e`` + projection ``h`` on the cached vectors (NT-Xent, LARS, warm-up + cosine),
keep the best ``e`` by STS-B dev, save frozen encoder + pooling + ``e`` (loadable with ``AutoModel``,
``trust_remote_code`` and ``csekit evaluate``), and score the 7 STS test sets for the base encoder alone and with
CLSR into OUTPUT_DIR/eval_results.json (test vectors are cached too; ``csekit evaluate OUTPUT_DIR`` gives the same
CLSR scores).

Defaults are the paper's: mean pooling, temperature 0.1, batch 512 pairs, lr 0.5, decay 1e-4, 2000 epochs, 10
warm-up epochs; training data NLI entailment pairs. The optimizer, LARS, is an inferred reading (the paper names
none; it "adopts" SimCLR, which uses LARS). --train_file stsb uses the STS-B train pairs scored >= 4 (the paper's
1,406); a .csv (sent0,sent1) brings your own pairs.

No evaluation sentence enters training: pairs sharing a sentence with any of the 7 STS test sets or with STS-B dev
(model selection) are dropped and counted (--test_overlap drop, the default). STS-B was compiled from the STS
2012-2016 data, so only 181 of the 1,406 STS-B pairs survive, fewer than one batch of 512: pass a smaller
--per_device_train_batch_size (Table 2 goes down to 64) or --test_overlap keep. --test_overlap keep trains on the
paper's selection as published; every score on a set its pairs overlap is then marked contaminated in
eval_results.json ("contaminated"), the printed table (*) and the model card.

--random_init true builds the backbone from its config with random weights (the paper's "mechanics" check on an
untrained BERT).

Several processes (``accelerate launch --num_processes N``): every process pools a contiguous share of each sentence
list the cache does not hold yet (the frozen-encoder pass is the expensive part), the main process stores the whole
entry, and every process reads it. The head, a few small matrix products per step on cached vectors, then trains in
every process alike (same seed, same vectors: the result of one process), and the main process writes the outputs.
"""

from csekit.trainers.recipe import CLSRRecipe, main_guard

RECIPE = CLSRRecipe(output_dir="outputs/clsr", description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
