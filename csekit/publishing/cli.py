"""``csekit card``, ``csekit push`` and ``csekit export-st``: publishing a trained model folder.

    csekit card MODEL [--output FILE] [--repo-id ORG/NAME] [--license L] [--figure missing|always|never]
                [--data-dir DIR]
    csekit push MODEL_DIR ORG/NAME [--private] [--keep-card] [--dry-run]
    csekit export-st MODEL OUT_DIR [--layout auto|plain|remote-code] [--overwrite]
    csekit export-onnx MODEL OUT [--quantize int8] [--opset N] [--overwrite]
"""

from ..errors import DataError
from ..options import add_data_dir, positive_int


def add_card_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "card",
        help="(Re)generate README.md, the model card, of a csekit model folder from its recorded results.",
        description="Render the model card of MODEL from config.json, training_args.json and eval_results.json "
        "(every reproduced number comes from that file) with the method family's template in model_cards/. The "
        "alignment/uniformity figure is drawn by encoding the STS-B train sentences when it is missing.",
    )
    parser.add_argument("model_dir", metavar="MODEL", help="A csekit model folder with eval_results.json, or the Hub "
                        "id of a published csekit model (then --output is required).")
    parser.add_argument("--output", default=None, help="Write the card here instead of MODEL/README.md.")
    parser.add_argument("--repo-id", default=None, help="Hub id used in the card's loading snippets (default: the "
                        "Hub id of MODEL, else <your-namespace>/<folder name>).")
    parser.add_argument("--license", default="apache-2.0", help="License in the card metadata (that of the weights).")
    parser.add_argument(
        "--figure", default="missing", choices=("missing", "always", "never"),
        help="Draw alignment_uniformity.png (and record its numbers in eval_results.json): when missing, always "
        "(re-evaluate), or never.",
    )
    add_data_dir(parser)
    parser.set_defaults(handler=run_card)


def run_card(args) -> int:
    from ..preflight import check_repo_id
    from .model_card import write_model_card

    if args.repo_id is not None:
        check_repo_id(args.repo_id)  # before anything is written
    path = write_model_card(args.model_dir, args.repo_id, args.license, args.figure, args.data_dir, args.output)
    print(f"wrote {path}")
    return 0


def add_push_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "push",
        help="Upload a csekit model folder to the Hugging Face Hub (safetensors only, code, tokenizer, card, results).",
        description="Create REPO_ID if needed and upload, in one commit, the files needed to load MODEL_DIR with "
        "AutoModel.from_pretrained(REPO_ID, trust_remote_code=True) and with SentenceTransformer(REPO_ID): the "
        "safetensors weights, config.json (with auto_map), the model code files, the tokenizer, the "
        "sentence-transformers modules, README.md, eval_results.json, and training_args.json and the card's figures "
        "when present. Pickles (*.bin, training_args.bin) and checkpoints are never "
        "uploaded. Uses the token saved by `hf auth login` or $HF_TOKEN.",
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="A csekit model folder with eval_results.json.")
    parser.add_argument("repo_id", metavar="REPO_ID", help="Target repository, 'namespace/name'.")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument(
        "--keep-card", action="store_true",
        help="Upload README.md as it is instead of re-rendering it with REPO_ID in the loading snippets.",
    )
    parser.add_argument("--dry-run", action="store_true",
                        help="Validate and print the plan: the repository, each file and its size, the total, what "
                        "the real push rewrites; write and upload nothing.")
    parser.set_defaults(handler=run_push)


def run_push(args) -> int:
    from ..preflight import check_repo_id
    from .hub import push_plan, push_to_hub

    check_repo_id(args.repo_id)  # before anything is written or uploaded
    if args.dry_run:
        print(push_plan(args.model_dir, args.repo_id, private=args.private, refresh_card=not args.keep_card))
        return 0
    commit, files = push_to_hub(args.model_dir, args.repo_id, private=args.private, refresh_card=not args.keep_card)
    print(f"uploaded {len(files)} files to {args.repo_id}: {getattr(commit, 'commit_url', commit)}")
    return 0


def add_export_st_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export-st",
        help="Write a sentence-transformers version of a csekit model (embeddings checked equal to 1e-5).",
        description="Make MODEL (a csekit folder or Hub id) loadable with SentenceTransformer(OUT_DIR). The 'plain' "
        "layout (Transformer + "
        "Pooling, no custom code) is used when the model is a backbone with last-layer [CLS]/mean pooling and no "
        "inference head; otherwise 'remote-code' ships the csekit model with a small sentence-transformers module "
        "(load with trust_remote_code=True). The export compares both models' embeddings of probe sentences and "
        "writes nothing unless they agree to 1e-5.",
    )
    parser.add_argument("model_dir", metavar="MODEL", help="A csekit model folder or the Hub id of a csekit model.")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="Folder to create.")
    parser.add_argument("--layout", default="auto", choices=("auto", "plain", "remote-code"),
                        help="auto: plain when possible, else remote-code.")
    parser.add_argument("--overwrite", action="store_true", help="Replace OUT_DIR if it exists.")
    parser.set_defaults(handler=run_export_st)


def add_export_onnx_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export-onnx",
        help="Write one ONNX graph from token ids to the sentence vector (pooling and normalisation inside).",
        description="Export MODEL (any folder or Hub id that SentenceTransformer loads, csekit's included) as "
        "OUT/model.onnx: input_ids and attention_mask in, the pooled (and, when the model normalises, normalised) "
        "sentence vector out, with the tokenizer beside it. The export compares the graph's vectors of probe "
        "sentences with SentenceTransformer.encode and writes nothing unless a float32 graph agrees to 1e-5. "
        "Score it with `csekit evaluate OUT --backend onnx`.",
    )
    parser.add_argument("model", metavar="MODEL", help="A folder or Hub id with sentence-transformers modules.")
    parser.add_argument("out_dir", metavar="OUT", help="Folder to create.")
    parser.add_argument("--quantize", choices=("int8",), default=None,
                        help="int8: onnxruntime's dynamic quantisation (int8 weights, activations quantised per "
                        "batch); the vectors change, the export records by how much.")
    parser.add_argument("--opset", type=positive_int, default=18, help="ONNX opset of the graph.")
    parser.add_argument("--overwrite", action="store_true", help="Replace OUT if it exists.")
    parser.set_defaults(handler=run_export_onnx)


def run_export_onnx(args) -> int:
    from .onnx_export import export_onnx, require_modules

    require_modules("export-onnx", ("sentence_transformers", "onnxruntime", "onnxscript"))

    record = export_onnx(args.model, args.out_dir, args.quantize, args.opset, args.overwrite)
    print(f"wrote {record['out_dir']} ({record['dimension']}-d vectors{', int8 weights' if args.quantize else ''}, "
          f"max |difference| from SentenceTransformer.encode {record['check']['max_abs_difference']:.1e}); score it "
          f"with `csekit evaluate {record['out_dir']} --backend onnx`")
    return 0


def run_export_st(args) -> int:
    try:
        import sentence_transformers  # noqa: F401  (an optional dependency)
    except ImportError:
        raise DataError("export-st needs sentence-transformers: pip install 'csekit[st]'") from None
    from .st_export import export_sentence_transformers

    result = export_sentence_transformers(args.model_dir, args.out_dir, args.layout, args.overwrite)
    trust = ", trust_remote_code=True" if result["layout"] == "remote-code" else ""
    print(f"wrote {result['out_dir']} ({result['layout']} layout, max |difference| "
          f"{result['max_abs_difference']:.1e}); "
          f"load with SentenceTransformer({result['out_dir']!r}{trust})")
    return 0


__all__ = ["add_card_parser", "add_export_st_parser", "add_push_parser"]
