"""One-shot check of the torch backend on CUDA: perfdag's own code paths, no Triton, no TensorRT-LLM.
Over 400 lines because a lent GPU session runs one script: every part lives here so one carry and one call cover it.

Made for a lent GPU machine with a few minutes on it (bench/gpu_cuda.sh installs the carried
wheels and runs this). Each part runs in its own try/except, so one failure keeps the others and
its error text lands in the JSON, which is rewritten after every part:

1. model: the built-in tiny Llama of params/default.yaml, built by harness.model.tiny as
   PrepareModel builds it (on CPU: build_tiny_llama has no device; quantize loads it on --device).
2. quantize: quantize_checkpoint on --device for every format perfdag knows, the GPU-only ones
   (nvfp4, w4a8_awq) included, with the greedy / teacher-forced token agreement with the fp32
   model that the Quantize manifest records; plus a bf16 cast and CUDA-vs-CPU fp32 for scale.
3. engine: build_torch_engine + load_torch_engine on --device against modelopt's in-memory
   quantized model (quantize_in_memory), as tests/test_quantize_engine.py does on CPU: max |logit
   difference|, greedy tokens, left-padded batch generate; formats the engine refuses say why.
4. throughput: the default engine (int8) in float32 and bfloat16 through InflightBatcher driven
   in-process, closed loop at concurrency 1, 8, 32 and max_batch_size, fixed new tokens, against
   HF generate one request at a time; synchronised timing, warm-up first, median of repeats.

    python bench/gpu_cuda.py [--device cuda|cpu] [--quick] [--out DIR] [--budget-s 270]

Writes DIR/gpu_cuda.json and prints a short table last. It is one file over 400 lines on purpose: it is
the single script carried to a machine for one call, and its parts share one runner and one record.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The default format first (throughput reuses its export), then those CPU runs refuse.
FORMATS = ("int8", "fp8", "nvfp4", "w4a8_awq", "int8_sq", "int4_awq", "none")
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def _cmd(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return (r.stdout or r.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {e}"


def _commit() -> str:
    """The commit measured: PERFDAG_COMMIT where the caller knows it (a lent machine's copy of the
    tree can carry git metadata older than its files), else the checkout's HEAD."""
    return os.environ.get("PERFDAG_COMMIT") or _cmd(["git", "-C", str(REPO), "rev-parse", "HEAD"])


def versions(device: str) -> dict:
    import torch
    import transformers

    from harness.cache.versions import package_version

    v = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
         "transformers": transformers.__version__, "nvidia-modelopt": package_version("nvidia-modelopt"),
         "numpy": package_version("numpy"), "triton": package_version("triton"),
         "pydantic": package_version("pydantic"), "perfdag_commit": _commit(),
         "cpus": os.cpu_count()}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        v.update(gpu=p.name, compute_capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                 gpu_memory_gib=round(p.total_memory / 2**30, 1), cudnn=torch.backends.cudnn.version(),
                 tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                 nvidia_smi=_cmd(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,memory.total",
                                  "--format=csv,noheader"]),
                 nvcc=_cmd(["nvcc", "--version"]).splitlines()[-1:])
    return v


def compile_modelopt_extensions(skip: bool) -> dict:
    """modelopt fake-quantizes on CUDA with extensions it compiles (nvcc) on first use, falling back
    to plain torch ops when that fails. Compile them up front, each in its own thread, so their cost
    is timed apart and a failure's compiler message is kept."""
    from modelopt.torch.quantization import extensions as ext

    out = {}

    def one(name, get):
        if skip:  # --no-modelopt-ext: modelopt takes its torch fallback, as after a failed compile
            get.extension = None
            out[name] = {"compiled": False, "skipped": True}
            return
        t = time.monotonic()
        try:
            get(raise_if_failed=True)
            out[name] = {"compiled": True, "seconds": round(time.monotonic() - t, 1)}
        except Exception as e:  # noqa: BLE001 - as modelopt does on failure: the fallback, once
            get.extension = None
            out[name] = {"compiled": False, "seconds": round(time.monotonic() - t, 1), "error": _err(e)}
    threads = [threading.Thread(target=one, args=item) for item in
               (("cuda_ext", ext.get_cuda_ext), ("cuda_ext_fp8", ext.get_cuda_ext_fp8))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


# ------------------------------------------------------------------ quantize and engine

def token_agreement(ref_model, model, prompts) -> dict:
    """What the Quantize manifest records: free-running greedy and teacher-forced argmax agreement."""
    from harness.backends.torch.quantize import greedy_tokens, teacher_forced_argmax

    def frac(a, b):
        pairs = [(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
        return round(sum(x == y for x, y in pairs) / max(1, len(pairs)), 6)
    return {"greedy_token_agreement": frac([greedy_tokens(ref_model, p) for p in prompts],
                                           [greedy_tokens(model, p) for p in prompts]),
            "teacher_forced_agreement": frac([teacher_forced_argmax(ref_model, p) for p in prompts],
                                             [teacher_forced_argmax(model, p) for p in prompts])}


def reference_rows(src, prompts, device) -> dict:
    """Scale for the agreements: a plain bf16 cast, and fp32 on this device against fp32 on CPU."""
    import torch

    from harness.backends.torch.quantize import load_fp32

    fp32 = load_fp32(src, device)
    rows = {"bfloat16_vs_fp32": token_agreement(fp32, load_fp32(src, device).to(torch.bfloat16), prompts)}
    if device != "cpu":
        rows["fp32_cuda_vs_fp32_cpu"] = token_agreement(load_fp32(src, "cpu"), fp32, prompts)
    return rows


def engine_vs_modelopt(src, export_dir: Path, fmt, calib, prompts, limits, device, work: Path) -> dict:
    import torch

    from harness.backends.torch.engine import build_torch_engine, load_torch_engine
    from harness.backends.torch.quantize import greedy_tokens, quantize_in_memory

    t = time.monotonic()
    eng_dir = work / f"engine_{fmt}"
    cfg = build_torch_engine(export_dir, eng_dir, dtype="float32", device=device, **limits)
    engine, _ = load_torch_engine(eng_dir, device=device)
    ref = quantize_in_memory(src, fmt, calib, device=device, log=lambda s: None)
    diff, mag, same, n = 0.0, 0.0, 0, 0
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device=device)
            a, b = engine(input_ids=ids).logits.float(), ref(input_ids=ids).logits.float()
            diff, mag = max(diff, (a - b).abs().max().item()), max(mag, b.abs().max().item())
            ga, gb = greedy_tokens(engine, p), greedy_tokens(ref, p)
            same, n = same + sum(x == y for x, y in zip(ga, gb)), n + len(gb)
        # HF generate on a left-padded batch: attention mask and KV cache through QuantLinear
        w = max(len(prompts[0]), len(prompts[1]))
        rows = [[0] * (w - len(q)) + q for q in prompts[:2]]
        mask = [[0] * (w - len(q)) + [1] * len(q) for q in prompts[:2]]
        kw = dict(input_ids=torch.tensor(rows, device=device), attention_mask=torch.tensor(mask, device=device),
                  max_new_tokens=8, do_sample=False, pad_token_id=0)
        batch_equal = bool(torch.equal(engine.generate(**kw), ref.generate(**kw)))
    return {"max_abs_logit_diff": diff, "max_abs_logit": round(mag, 4), "greedy_tokens_equal": round(same / n, 6),
            "padded_batch_generate_equal": batch_equal, "quantized_layers": cfg["quantization"]["quantized_layers"],
            "seconds": round(time.monotonic() - t, 2)}


def quantize_format(src, params, calib, prompts, device, work: Path, fmt) -> dict:
    """One format: quantize_checkpoint's record, then the engine against modelopt (or its refusal)."""
    from harness.backends.torch.engine import EXPORT_ALGOS, build_torch_engine
    from harness.backends.torch.quantize import quantize_checkpoint

    b = params.build
    limits = dict(max_batch_size=b.max_batch_size, max_num_tokens=b.max_num_tokens,
                  max_seq_len=b.max_seq_len, max_input_len=b.max_input_len)
    row = {}
    export = src if fmt == "none" else work / f"q_{fmt}"
    try:
        row["quantize"] = ({"format": "none", "note": "unquantized: the engine reads the fp32 checkpoint"}
                           if fmt == "none" else quantize_checkpoint(src, export, fmt, calib, device=device, log=log))
    except Exception as e:  # noqa: BLE001 - recorded; the engine needs the export, so stop here
        return {"quantize": {"error": _err(e)}}
    engine_formats = {f for f, _, _ in EXPORT_ALGOS.values()} | {"none"}
    try:
        if fmt in engine_formats:
            row["engine"] = engine_vs_modelopt(src, export, fmt, calib, prompts, limits, device, work)
        else:  # the engine must refuse it, with a message naming the fix
            build_torch_engine(export, work / f"engine_{fmt}", device=device, **limits)
            row["engine"] = {"error": "the torch engine built a format it does not implement"}
    except Exception as e:  # noqa: BLE001
        row["engine"] = {("error" if fmt in engine_formats else "refused"): _err(e)}
    return row


# ------------------------------------------------------------------ throughput

def batcher_run(batcher, prompts, n, c, new_tokens, timeout_s=300.0) -> dict:
    """Closed loop in-process: c requests in flight; each final response submits the next prompt."""
    from harness.backends.torch.batcher import GenRequest

    work, lock, done = deque(range(n)), threading.Lock(), threading.Event()
    outs, errors, ttft, lat = {}, [], [], []

    def submit_next():
        with lock:
            if not work:
                return
            i = work.popleft()
        toks, t0 = [], time.perf_counter()

        def on_tokens(new, final):
            if new and not toks:
                ttft.append(time.perf_counter() - t0)
            toks.extend(new)
            if final:
                lat.append(time.perf_counter() - t0)
                outs[i] = toks
                if len(outs) == n:
                    done.set()
                else:
                    submit_next()

        def on_error(msg):
            errors.append(msg)
            done.set()
        batcher.submit(GenRequest(input_ids=prompts[i % len(prompts)], max_new_tokens=new_tokens,
                                  on_tokens=on_tokens, on_error=on_error))

    _sync()
    t0 = time.perf_counter()
    for _ in range(min(c, n)):
        submit_next()
    if not done.wait(timeout_s) or errors:
        raise RuntimeError(f"batcher: {len(outs)}/{n} requests finished; {errors[:1]}")
    _sync()
    el = time.perf_counter() - t0
    tokens = sum(len(t) for t in outs.values())
    return {"tokens": tokens, "seconds": el, "tok_s": tokens / el, "mean_latency_ms": 1e3 * statistics.mean(lat),
            "mean_ttft_ms": 1e3 * statistics.mean(ttft), "outputs": [outs[i] for i in range(n)]}


def hf_run(model, prompts, n, new_tokens, device) -> dict:
    import torch
    pad = model.generation_config.pad_token_id
    pad = model.generation_config.eos_token_id if pad is None else pad
    outs, lat = [], []
    _sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(n):
            s = time.perf_counter()
            x = torch.tensor([prompts[i % len(prompts)]], device=device)
            y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)
            outs.append(y[0, x.shape[1]:].tolist())  # .tolist() synchronises
            lat.append(time.perf_counter() - s)
    el = time.perf_counter() - t0
    tokens = sum(map(len, outs))
    return {"tokens": tokens, "seconds": el, "tok_s": tokens / el, "mean_latency_ms": 1e3 * statistics.mean(lat),
            "outputs": outs}


def _median(runs: list[dict]) -> dict:
    best = sorted(runs, key=lambda r: r["tok_s"])[len(runs) // 2]
    return {**{k: v for k, v in best.items() if k != "outputs"},
            "tok_s_runs": [round(r["tok_s"], 1) for r in runs]}


def throughput_part(engine_dir: Path, dtype: str, prompts, levels, new_tokens, repeats, min_requests, device) -> dict:
    from harness.backends.torch.batcher import InflightBatcher, load_engine

    model, cfg = load_engine(engine_dir, device=device)
    n_hf = min_requests
    hf_run(model, prompts, 2, new_tokens, device)  # warm-up: kernels, allocator, generate's setup
    hf = [hf_run(model, prompts, n_hf, new_tokens, device) for _ in range(repeats)]
    res = {"dtype": dtype, "hf_generate_one_at_a_time": {**_median(hf), "requests": n_hf}, "levels": {}}
    batcher = InflightBatcher(model, max_batch_size=cfg["max_batch_size"], max_num_tokens=cfg["max_num_tokens"],
                              max_seq_len=cfg["max_seq_len"], max_input_len=cfg.get("max_input_len"),
                              device=device).start()
    try:
        for c in levels:
            n = max(min_requests, 4 * c)
            batcher_run(batcher, prompts, c, c, new_tokens)  # warm-up at this batch size, not counted
            runs = [batcher_run(batcher, prompts, n, c, new_tokens) for _ in range(repeats)]
            same = sum(a == b for a, b in zip(runs[0]["outputs"][:n_hf], hf[0]["outputs"]))
            row = {**_median(runs), "requests": n, "identical_to_hf": f"{same}/{min(n, n_hf)}",
                   "speedup_vs_hf": round(_median(runs)["tok_s"] / res["hf_generate_one_at_a_time"]["tok_s"], 2)}
            res["levels"][str(c)] = row
            log(f"  {dtype} concurrency {c}: {row['tok_s']:.0f} tok/s ({row['speedup_vs_hf']}x HF), "
                f"identical to HF {row['identical_to_hf']}")
    finally:
        batcher.stop()
    res["batcher_stats"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in batcher.stats.items()}
    return res


def _sync():
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _err(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return f"{type(e).__name__}: {e}"[:2000] + "\n" + "".join(tb[-3:])[-1500:]


# ------------------------------------------------------------------ main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="fewer training steps, prompts, tokens and repeats")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "bench" / "results"))
    ap.add_argument("--budget-s", type=float, default=270.0, help="skip the parts not started by then")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--dtypes", default=None, help="throughput engine dtypes (cuda: float32,bfloat16; cpu: float32)")
    ap.add_argument("--max-batch-size", type=int, default=None,
                    help="throughput engine's build.max_batch_size (cuda: 128; cpu: params/default.yaml's)")
    ap.add_argument("--no-modelopt-ext", action="store_true", help="do not compile modelopt's CUDA extensions")
    args = ap.parse_args()
    dev, quick = args.device, args.quick
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "gpu_cuda.json"
    res: dict = {"args": vars(args), "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def save():
        res["wall_s"] = round(time.monotonic() - T0, 1)
        out_file.write_text(json.dumps(res, indent=2, default=str))

    def part(name, fn, into=res):
        """Runs one part unless the budget is spent; its result or error goes into `into[name]`."""
        if time.monotonic() - T0 > args.budget_s:
            into[name] = {"skipped": f"time budget of {args.budget_s:.0f}s spent"}
        else:
            log(f"part {name}")
            t = time.monotonic()
            try:
                into[name] = fn()
            except Exception as e:  # noqa: BLE001 - recorded; the next part still runs
                into[name] = {"error": _err(e)}
                log(f"part {name} failed: {type(e).__name__}: {e}")
            into[name]["part_seconds"] = round(time.monotonic() - t, 1)
        save()
        return into[name]

    import torch
    import transformers
    transformers.utils.logging.disable_progress_bar()  # a bar per model load would bury the log
    if dev == "cpu":  # tiny matmuls: more threads only contend (bench/engine_throughput.py's --threads 1)
        torch.set_num_threads(1)
    if dev == "cuda" and not torch.cuda.is_available():
        res["error"] = "--device cuda but torch sees no CUDA device"
        save()
        print(res["error"])
        return 1
    part("versions", lambda: versions(dev))
    work = Path(tempfile.mkdtemp(prefix="perfdag_gpu_cuda_"))
    try:
        return run_parts(args, dev, quick, work, res, part)
    except Exception as e:  # noqa: BLE001 - outside any part (params, calibration prompts): recorded too
        res["error"] = _err(e)
        log(f"failed: {type(e).__name__}: {e}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
        save()
        print_table(res, out_file)


def run_parts(args, dev, quick, work: Path, res: dict, part) -> int:
    from harness.config import resolve

    params = resolve(REPO / "params" / "default.yaml")
    tiny = params.model.tiny.model_copy(update={"train_steps": 20}) if quick else params.model.tiny
    src = work / "model"
    ext = {}
    compile_thread = None
    if dev == "cuda":  # nvcc runs while the model trains on the CPU
        import modelopt.torch.quantization  # noqa: F401 - imported here, not in two threads at once
        import torch.utils.cpp_extension  # noqa: F401

        def compile_ext():
            try:
                ext.update(compile_modelopt_extensions(args.no_modelopt_ext))
            except Exception as e:  # noqa: BLE001 - modelopt then compiles (or falls back) on first use
                ext["error"] = _err(e)
        compile_thread = threading.Thread(target=compile_ext)
        compile_thread.start()

    def model():
        from harness.model.tiny import build_tiny_llama
        return {**build_tiny_llama(tiny, src, log=log), "built_on": "cpu (build_tiny_llama has no device option)",
                "train_steps": tiny.train_steps}
    part("model", model)
    if compile_thread is not None:
        part("modelopt_extensions", lambda: (compile_thread.join(), ext)[1])
    if "error" in res["model"]:
        return 1

    from harness.model.calibration import calibration_prompts
    calib = calibration_prompts(src, 8 if quick else params.quantize.calib_size, params.quantize.calib_max_len)
    prompts = calib[:4]  # the engine-vs-modelopt prompts, as many as the CPU test uses
    part("agreement_scale", lambda: reference_rows(src, calib, dev))
    res["quantize"] = {"calib_samples": len(calib), "reference": "the fp32 model on the same device", "formats": {}}
    for fmt in [f for f in args.formats.split(",") if f]:
        part(fmt, lambda fmt=fmt: quantize_format(src, params, calib, prompts, dev, work, fmt),
             into=res["quantize"]["formats"])

    # throughput: the default format's export, as engines of each dtype built by the backend's code
    b, fmt = params.build, params.quantize.format
    mbs = args.max_batch_size or (128 if dev == "cuda" else b.max_batch_size)
    levels = sorted({1, 8, 32, mbs})
    new_tokens, repeats, min_req = (8, 1, 8) if quick else (32, 3, 16)
    dtypes = (args.dtypes or ("float32,bfloat16" if dev == "cuda" else "float32")).split(",")
    for dtype in dtypes:
        def bench(dtype=dtype):
            from harness.backends.torch.engine import build_torch_engine
            from harness.backends.torch.quantize import quantize_checkpoint
            from harness.model.datasets import load_dataset

            export = work / f"q_{fmt}"
            if not (export / "config.json").is_file():
                quantize_checkpoint(src, export, fmt, calib, device=dev, log=log)
            eng = work / f"throughput_{dtype}"
            build_torch_engine(export, eng, dtype=dtype, device=dev, max_batch_size=mbs,
                               max_num_tokens=b.max_num_tokens, max_seq_len=b.max_seq_len,
                               max_input_len=b.max_input_len)
            ps = [s.input_ids for s in load_dataset("builtin", None, eng, 128, b.max_input_len)]
            return {"format": fmt, "max_batch_size": mbs, "new_tokens": new_tokens, "repeats": repeats,
                    "prompt_tokens": [min(map(len, ps)), max(map(len, ps))],
                    **throughput_part(eng, dtype, ps, levels, new_tokens, repeats, min_req, dev)}
        part(f"throughput_{dtype}", bench)
    if dev == "cuda":
        import torch
        res["max_gpu_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return 0


def print_table(res: dict, out_file: Path) -> None:
    v = res.get("versions", {})
    print("\n=== perfdag torch backend on", v.get("gpu", "cpu"), f"(cc {v.get('compute_capability', '-')})")
    print(f"torch {v.get('torch')} CUDA {v.get('torch_cuda')}, transformers {v.get('transformers')}, "
          f"modelopt {v.get('nvidia-modelopt')}, driver/smi: {v.get('nvidia_smi', '-')}")
    if "modelopt_extensions" in res:
        print("modelopt CUDA extensions:", json.dumps(res["modelopt_extensions"]))
    print("agreement scale:", json.dumps(res.get("agreement_scale")))
    print(f"\n{'format':<9} {'greedy':>7} {'teacher':>7} {'quant s':>7} {'engine max|dlogit|':>19} "
          f"{'eng greedy eq':>13} {'batch gen eq':>12}")
    for fmt, row in res.get("quantize", {}).get("formats", {}).items():
        q, e = row.get("quantize", {}), row.get("engine", {})
        if "skipped" in row or "error" in row:
            print(f"{fmt:<9} {(row.get('skipped') or row.get('error')).splitlines()[0][:150]}")
            continue
        if "error" in q:
            print(f"{fmt:<9} quantize failed: {q['error'].splitlines()[0][:150]}")
            continue
        eng = (f"{e['max_abs_logit_diff']:>19.3g} {e['greedy_tokens_equal']:>13} {str(e['padded_batch_generate_equal']):>12}"
               if "max_abs_logit_diff" in e else
               "  engine " + ("refused: " if "refused" in e else "ERROR: ")
               + (e.get("refused") or e.get("error") or "?").splitlines()[0][:110])
        print(f"{fmt:<9} {q.get('greedy_token_agreement', 1.0):>7} {q.get('teacher_forced_agreement', 1.0):>7} "
              f"{q.get('seconds', 0):>7} {eng}")
    for key in [k for k in res if k.startswith("throughput_")]:
        t = res[key]
        if "levels" not in t:
            print(f"\n{key}: {json.dumps(t)[:300]}")
            continue
        hf = t["hf_generate_one_at_a_time"]
        print(f"\n{key}: {t['format']} engine, max_batch_size {t['max_batch_size']}, {t['new_tokens']} new tokens, "
              f"median of {t['repeats']}; HF generate 1-at-a-time {hf['tok_s']:.0f} tok/s ({hf['mean_latency_ms']:.1f} ms/req)")
        print(f"{'concurrency':>11} {'tok/s':>8} {'x HF':>6} {'lat ms':>8} {'TTFT ms':>8} {'identical':>9}")
        for c, r in t["levels"].items():
            print(f"{c:>11} {r['tok_s']:>8.0f} {r['speedup_vs_hf']:>6} {r['mean_latency_ms']:>8.1f} "
                  f"{r['mean_ttft_ms']:>8.2f} {r['identical_to_hf']:>9}")
    print(f"\nwall {res.get('wall_s')}s; full record: {out_file}")


if __name__ == "__main__":
    sys.exit(main())
