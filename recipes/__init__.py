"""csekit's training recipes, one module per method (``simcse``, ``whitenedcse``, ``cmlm_cse``, ``clsr``).

Each runs the same way from a source checkout or an installed csekit:

    accelerate launch recipes/simcse.py [--config recipes/configs/X.yaml] [--key value ...]   # checkout
    accelerate launch -m csekit.recipes.simcse [...]                                          # installed
    csekit train simcse [...]                                                                 # one process

``--help`` lists every flag; the method flags are the fields of the method's model config (paper defaults).
The YAML files in ``configs/`` ship with the package: ``--config quickstart`` names ``configs/quickstart.yaml`` and
``--config paper/simcse_bert_base`` a file under ``configs/paper/``.
"""
