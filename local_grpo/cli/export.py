"""`local-grpo export`: a run as a LoRA adapter, a merged 16-bit model or a GGUF file, verified by reloading."""

from __future__ import annotations

import json
import sys

from ..export import FORMATS, GGUF_TYPES, MERGED_TYPES, RULES, export_run
from ..output import stdout_to_stderr
from ..rundir import ADAPTER_CHOICES


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a run as a LoRA adapter, a merged 16-bit model or a GGUF file",
                              description="Export RUN_DIR's adapter, reload it, and check it gives the trained model's greedy tokens.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished run directory (with adapter/)")
    p.add_argument("--format", required=True, choices=FORMATS, help="lora, merged16 or gguf")
    p.add_argument("--out", required=True, help="target folder (must not exist unless --overwrite)")
    p.add_argument("--quant", help=f"merged16: {', '.join(MERGED_TYPES)} (default f16); gguf: {', '.join(GGUF_TYPES)} (default f16)")
    p.add_argument("--verify-prompts", type=int, default=4, help="held-out prompts for the round-trip check (default 4; 0 = skip)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    p.add_argument("--checkpoint", choices=ADAPTER_CHOICES,
                   help="best (the default when the run kept one, trained with --eval-steps) or final")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    p.set_defaults(func=main)


def main(args) -> int:
    with stdout_to_stderr(args.json):  # library prints must not reach a --json stdout
        result = export_run(args.run_dir, args.format, args.out, quant=args.quant, verify_prompts=args.verify_prompts,
                            overwrite=args.overwrite, checkpoint=args.checkpoint)
    if args.json:
        print(json.dumps(result))
        return 0
    check = result.get("verification")
    print(f"Exported {args.format}{' ' + result['quant'] if result.get('quant') else ''} to {result['path']} in {result['seconds']:.0f} s")
    print(f"  from {result['checkpoint']['text']}")
    if check:
        print(f"  verified: {check['identical']}/{check['prompts']} prompts give the same greedy tokens "
              f"(token agreement {check['token_agreement']}, final answers {check['answer_agreement']}"
              + (f", next-token choices {check['decision_agreement']}" if check.get("decision_agreement") is not None else "")
              + f"); required: {RULES[check['rule']]}")
        if "runtime" in check:
            print(f"  run in {check['runtime']}; same prompt ids as the trained tokenizer: {check['prompt_ids_match']}")
            if check.get("not_in_llama_cpp"):
                print(f"  note: {check['not_in_llama_cpp']}", file=sys.stderr)
    if result.get("modelfile"):
        print(f"  Ollama: cd {result['path']} && ollama create NAME -f {result['modelfile']['file']}")
    return 0
