"""The names a training-free extraction grid is made of: layer presets, prompt templates, token aggregations,
post-processing steps and STS fit sets. Kept apart from the modules that implement them (which load torch and
scikit-learn), so ``csekit extract --help`` lists them without loading either."""

LAYER_PRESETS = ("last", "first_last", "1_2_last")
AGGREGATIONS = ("avg", "idf-w", "idf-t", "no-biases", "mask")
STEP_NAMES = ("zscore", "quantile-u", "whiten", "abtt-D", "normalize")
STS_FIT_SETS = ("test", "all-splits")
TEMPLATES = {  # the paper's Table 1: [X] is the sentence, [MASK] a slot whose state the mask aggregation reads
    "T0": 'This sentence: "[X]" means [MASK].',
    "T1": 'This sentence: "[X]" means [MASK][MASK].',
    "T2": 'This sentence: "[X]" means "[MASK][MASK]" and is about [MASK].',
    "T3": 'This sentence from the paraphrase dictionary: "[X]" means "[MASK]", which is about [MASK].',
    "T4": 'This sentence from the dictionary: "[X]" means "[MASK]" and is about [MASK], which is a synonym for [MASK].',
}

__all__ = ["AGGREGATIONS", "LAYER_PRESETS", "STEP_NAMES", "STS_FIT_SETS", "TEMPLATES"]
