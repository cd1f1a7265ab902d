"""Publishing a trained model folder: model cards (``model_card``), the Hub upload (``hub``), the card's
alignment/uniformity figure (``figure``) and the sentence-transformers export (``st_export``). Import the module you
need; this package imports none of them (jinja2, matplotlib and sentence-transformers load only when used)."""
