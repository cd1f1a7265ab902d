"""The conformance suite on a decoder: every check of ``test_conformance.py`` that trains or builds on the tests'
backbone, collected again here with a tiny Qwen3 decoder in its place (``tests/test_decoders.py``'s config and
byte-level BPE, dropout on its attention, last-token pooling where a method's test flags pool the first token).

A method the registry keeps off decoders (``Method.not_on_decoders``: a masked LM's methods) is a skipped case that
says why. The checks run as written in ``test_conformance.py``, with its oracles; only the backbone differs.
"""

import pytest

from test_conformance import (  # noqa: F401 (the fixtures and tests collected here, on the decoder)
    data,
    launched,
    loaded_without_csekit,
    test_a_frozen_network_gets_no_gradient_and_no_optimizer_slot,
    test_a_run_resumed_after_a_crash_ends_like_the_uninterrupted_one,
    test_a_step_draws_nothing_from_the_global_generators_but_dropout,
    test_bad_input_is_one_line_exit_2_and_writes_nothing,
    test_card_and_push_dry_run_publish_no_local_path_and_no_pickle,
    test_each_declared_augmentation_makes_views_that_differ_from_the_sentence,
    test_each_declared_loss_term_moves_the_loss_and_the_gradients_with_its_weight,
    test_every_float_setting_changes_the_loss_of_a_model_built_with_it,
    test_every_setting_round_trips_from_its_flag_to_config_json,
    test_half_precision_runs_the_encoder_in_half_and_keeps_the_losses_float32,
    test_packed_and_padded_batches_train_to_the_same_weights,
    test_saved_model_loads_with_automodel_remote_code_and_sentence_transformers,
    test_two_processes_train_several_datasets_as_one_process_with_the_whole_batch,
    test_two_processes_train_what_one_process_trains_with_the_whole_batch,
    test_two_processes_with_gradient_caching_train_what_one_process_trains_uncached,
    test_two_processes_with_matryoshka_terms_train_what_one_process_trains,
    trained,
)
from test_decoders import save_tiny_decoder


def applies(method) -> bool:
    """Whether the registry lets ``method`` train a decoder (the module-level hook ``selected`` reads)."""
    return not method.not_on_decoders


@pytest.fixture(autouse=True)
def decoder_methods_only(request):
    method = getattr(request.node, "callspec", None) and request.node.callspec.params.get("method")
    if method is not None and not applies(method):
        pytest.skip(f"{method.name} on a decoder: {method.not_on_decoders}")


@pytest.fixture(scope="module")
def make_backbone():
    """``(folder, dropout) -> folder``: ``test_decoders.py``'s tiny Qwen3 with attention dropout ``dropout``."""
    return lambda folder, dropout=0.1: save_tiny_decoder(folder, "qwen3", attention_dropout=dropout)


@pytest.fixture(scope="module")
def tiny_backbone(make_backbone, tmp_path_factory):
    """The decoder with attention dropout 0.1: training draws from the random generator (resuming must restore it)."""
    return make_backbone(tmp_path_factory.mktemp("tiny_decoder"))
