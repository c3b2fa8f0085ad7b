"""`python -m pipeline whisper-triton --params-file FILE --out DIR`: whisper's Triton form (TensorRT-LLM's Whisper
example) written out from the params: commands.sh (convert_checkpoint.py and the two trtllm-build lines) and
model_repo/ (whisper_bls and tensorrt_llm, each config.pbtxt parsed as Triton's ModelConfig first). Nothing runs:
perfdag has not run this form on a GPU, and FullRun refuses it (harness/backends/trtllm/whisper.py)."""
from __future__ import annotations

from harness.config import resolve
from harness.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser("whisper-triton", help="write whisper's TensorRT-LLM commands and Triton model repository "
                       "(rendered and checked, not run)", description=__doc__)
    p.add_argument("--params-file", required=True, help="a whisper params file with build.backend: trtllm and a "
                   "trtllm_whisper section")
    p.add_argument("--overrides", default="", help='"section.key=value,..." as for FullRun')
    p.add_argument("--out", required=True, metavar="DIR", help="where to write (must not exist)")


def run(args) -> int:
    # Here, not at the top: the trtllm package is not needed by the commands sharing this parser.
    from harness.backends.trtllm import whisper

    def form_problems(p) -> list[str]:
        if not whisper.asks_for_it(p):
            return ["build.backend, loadgen.mlperf_model: whisper's Triton form needs build.backend=trtllm and "
                    f"loadgen.mlperf_model=whisper (see {whisper.EXAMPLE})"]
        return whisper.problems(p)

    params = resolve(args.params_file, args.overrides, checks=(form_problems,))
    try:
        done = whisper.write(params, args.out)
    except FileExistsError:
        raise InputError(f"--out: {args.out} exists; give a new directory") from None
    print(f"whisper-triton: {', '.join(done['models'])} in {args.out}/model_repo, commands in {done['commands']} "
          "(rendered and checked against Triton's ModelConfig and trtllm-build's flags; not run)")
    for note in whisper.notes(params):
        print(f"  note: {note}")
    return 0
