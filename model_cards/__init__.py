"""Model-card templates (jinja2, one per method family), shipped as package data of ``csekit.model_cards`` and
rendered by [`csekit.publishing.model_card`][csekit.publishing.model_card]."""
