"""The parameter document: one pydantic model per section, validated as a whole.
Over 400 lines because it is the whole parameter document, one short model per section; splitting it would scatter the cross-section rules.

Every section forbids unknown keys so a typo is an error, not a silently ignored setting.
Cross-section rules live on `Params` because they need more than one section.
The module is over 400 lines because every section's fields are declared here, each with the
comment that says what it means: one place to read the whole document.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from harness import CHECKOUT
from harness.cache.hashing import file_sha256
from harness.config.layout import LayoutSection
from harness.config.section import Section
from harness.config.sessions import SessionsSection
from harness.config.slo import SloError, parse_slo
from harness.mlperf import benchmarks
from harness.slurm.oci import check_bundle_here
from harness.untrusted import limits
from harness.untrusted.files import not_regular

FlagValue = Union[bool, int, float, str]

# Quantization formats modelopt runs on CPU (fake quant) vs those that need a GPU.
CPU_QUANT_FORMATS = ("none", "int8", "int8_sq", "fp8", "int4_awq")
GPU_ONLY_QUANT_FORMATS = ("w4a8_awq", "nvfp4")
QuantFormat = Literal["none", "int8", "int8_sq", "fp8", "int4_awq", "w4a8_awq", "nvfp4"]

SCENARIOS = benchmarks.SCENARIOS


def _bind_address(v: str) -> str:
    import ipaddress
    if v == "localhost":
        return v
    try:
        ipaddress.ip_address(v)
    except ValueError:
        raise ValueError(f"{v!r} is not an IP address to bind; use 127.0.0.1 (this host only), "
                         "0.0.0.0 (every interface) or another address of this host") from None
    return v


def _distinct_ports(v: list[int]) -> list[int]:
    bad = [p for p in v if not 1024 <= p <= 65535]
    if bad:
        raise ValueError(f"ports {bad} outside 1024..65535")
    if len(set(v)) != len(v):
        raise ValueError("ports must be distinct")
    return v


# Field types the server sections share (triton and openai).
BindAddress = Annotated[str, AfterValidator(_bind_address)]
Ports = Annotated[list[int], AfterValidator(_distinct_ports)]
# One endpoint may be given as a plain string.
Endpoints = Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)]


class TinyModel(Section):
    """The built-in tiny Llama: architecture, seed and its short training run."""

    vocab_size: int = Field(512, ge=64, le=65536)
    hidden_size: int = Field(128, ge=8)
    intermediate_size: int = Field(384, ge=8)
    num_layers: int = Field(2, ge=1, le=64)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(2, ge=1)
    max_position_embeddings: int = Field(512, ge=16)
    seed: int = 0
    train_steps: int = Field(300, ge=0)
    train_batch_size: int = Field(16, ge=1)
    train_seq_len: int = Field(64, ge=8)
    learning_rate: float = Field(3e-3, gt=0, le=1)
    # Shipped stand-in datasets (harness/data/standins/) whose answers go into the training text,
    # each `teach_repeats` times, so the model can answer their benchmark's questions.
    # agentic-trajectories: the session stand-in's recorded assistant turns (harness/sessions/lessons.py).
    teach: list[Literal["mixtral-8x7b", "llama3.1-405b", "deepseek-r1", "gpt-oss-120b", "llama3.1-8b-edge",
                        "qwen3.6-27b", "agentic-trajectories"]] = []
    teach_repeats: int = Field(4, ge=1, le=100)
    # false: train on the taught stand-ins only (a model that must answer them, not continue the corpus).
    corpus: bool = True

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be a multiple of num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} must be a multiple of num_kv_heads {self.num_kv_heads}")
        return self


BUILTIN_CHECKPOINTS = ("builtin", "builtin-vl", "builtin-whisper")  # models perfdag builds itself, not read from a directory


class ModelSection(Section):
    name: str = Field("tiny-llama", min_length=1)
    # "builtin" builds the tiny Llama; "builtin-vl" the tiny LLaVA of the qwen3-vl stand-in
    # (harness/model/tiny_vl.py, seeded by model.tiny.seed); "builtin-whisper" the tiny Whisper taught the
    # whisper stand-in (harness/model/tiny_whisper.py: model.tiny.seed, train_steps, learning_rate);
    # anything else is a Hugging Face checkpoint directory.
    checkpoint: str = "builtin"
    tiny: TinyModel = TinyModel()

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint_exists(cls, v: str) -> str:
        if v in BUILTIN_CHECKPOINTS:
            return v
        p = Path(v).expanduser()
        if not p.is_dir():
            raise ValueError(f"checkpoint directory {v!r} does not exist; give a Hugging Face model directory, "
                             "'builtin', 'builtin-vl' or 'builtin-whisper'")
        if not (p / "config.json").is_file():
            raise ValueError(f"checkpoint directory {v!r} has no config.json; is it a Hugging Face model directory?")
        return str(p.resolve())


class QuantizeSection(Section):
    format: QuantFormat = "int8"
    calib_size: int = Field(32, ge=1, le=1_000_000)
    calib_max_len: int = Field(128, ge=8)
    kv_cache_dtype: Literal["none", "fp8", "int8"] = "none"
    # TRTLLM_CHECKPOINT_FLAGS land here; keys naming a field above are applied to it.
    flags: dict[str, FlagValue] = {}


class BuildSection(Section):
    # torch: the CPU/CUDA torch engine on Triton; trtllm: TensorRT-LLM engines on Triton;
    # openai: an OpenAI-compatible server (the `openai` section says which).
    backend: Literal["torch", "trtllm", "openai"] = "torch"
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    max_batch_size: int = Field(32, ge=1, le=65536)
    max_num_tokens: int = Field(2048, ge=1)
    max_seq_len: int = Field(256, ge=2)
    max_input_len: int = Field(128, ge=1)
    tp_size: int = Field(1, ge=1, le=64)
    pp_size: int = Field(1, ge=1, le=64)
    # TRTLLM_BUILD_FLAGS land here; keys naming a field above are applied to it.
    flags: dict[str, FlagValue] = {}


class RuntimeSection(Section):
    batch_scheduler_policy: Literal["max_utilization", "guaranteed_no_evict"] = "max_utilization"
    max_queue_delay_microseconds: int = Field(0, ge=0)
    exclude_input_in_output: bool = True
    kv_cache_free_gpu_mem_fraction: float = Field(0.9, gt=0, le=1)
    enable_chunked_context: bool = False
    enable_kv_cache_reuse: bool = False
    # Engine instances (data-parallel ranks) per server.
    instances_per_server: int = Field(1, ge=1, le=64)
    # trtllm: GPUs on the node for serving; data-parallel ranks = num_gpus / (tp_size * pp_size).
    num_gpus: int = Field(1, ge=1, le=1024)
    # trtllm: GPU ids per data-parallel rank, e.g. [[0,1],[2,3]]; empty: consecutive blocks.
    gpu_device_ids: list[list[int]] = []
    max_tokens_in_paged_kv_cache: Optional[int] = Field(None, ge=1)
    # TRTLLM_RUNTIME_FLAGS land here; keys naming a field above are applied to it.
    flags: dict[str, FlagValue] = {}


class TritonSection(Section):
    # Unset: 1 for Offline, one per data-parallel rank for Server/Interactive (NVIDIA's convention).
    num_servers: Optional[int] = Field(None, ge=1, le=64)
    bind: BindAddress = "127.0.0.1"
    # Empty: ports are picked free at launch.
    grpc_ports: Ports = []
    model_name: str = Field("tensorrt_llm", pattern=r"^[A-Za-z0-9_.-]+$")
    # Servers launched outside perfdag (multi-node): no spawning. ["host:port", ...] or NVIDIA's
    # "host_a:8001,8002|host_b:8001".
    endpoints: Endpoints = []
    ready_timeout_s: float = Field(180, gt=0)
    # Path of the tritonserver binary; "auto" takes the one bundled with nvidia-pytriton.
    binary: str = "auto"
    # How LoadGen's clients talk to the servers: "grpc" (ModelStreamInfer / ModelInfer) or "generate"
    # (HTTP, Triton's generate extension: /v2/models/<m>/generate_stream, server-sent events).
    protocol: Literal["grpc", "generate"] = "grpc"


class OpenAISection(Section):
    """build.backend=openai: which OpenAI-compatible server, and how perfdag launches and talks to it."""

    server: Literal["transformers", "trtllm-serve", "vllm", "sglang"] = "transformers"
    # Unset: 1 for Offline, one per data-parallel rank (runtime.num_gpus / tp*pp) for Server/Interactive.
    num_servers: Optional[int] = Field(None, ge=1, le=64)
    bind: BindAddress = "127.0.0.1"
    ports: Ports = []  # empty: free ports at launch
    # Servers launched outside perfdag: ["http://host:8000", "host:8001", ...]; nothing is spawned.
    endpoints: Endpoints = []
    # The model name requests carry; unset: model.name (none for transformers serve, which perfdag
    # pins to its one model). A server started elsewhere serves its model under its own name.
    model: Optional[str] = Field(None, min_length=1)
    # The server's command; "auto": `transformers`, `trtllm-serve`, `vllm` from this venv's PATH,
    # `python -m sglang.launch_server`.
    binary: str = "auto"
    ready_timeout_s: float = Field(600, gt=0)
    # How prompts go out / output tokens come back; "auto": token ids where the server takes and
    # returns them (trtllm-serve, vLLM, SGLang), text and re-tokenized text for transformers serve.
    prompt: Literal["auto", "token_ids", "text"] = "auto"
    output_tokens: Literal["auto", "server", "retokenize"] = "auto"
    # Which endpoint requests go to: /v1/completions, /v1/chat/completions (the chat core: messages,
    # images, tools, reasoning) or /v1/audio/transcriptions (the transcription core: a clip uploaded as a
    # multipart form); "auto": what loadgen.mlperf_model's reference sends (harness/config/openai.py).
    api: Literal["auto", "completions", "chat", "transcriptions"] = "auto"
    # trtllm-serve: written to the --extra_llm_api_options YAML (TensorRT-LLM's LLM API keys).
    llm_api_options: dict[str, Any] = {}
    # Extra command-line arguments for the server, appended as given (checked for control characters).
    extra_args: list[str] = []
    # transformers serve on CPU: continuous batching, its KV-cache blocks, and torch threads per server.
    continuous_batching: bool = True
    cb_num_blocks: int = Field(512, ge=16)
    torch_threads: int = Field(1, ge=1, le=256)



class HarnessSection(Section):
    frontends: int = Field(1, ge=1, le=64)
    clients_per_frontend: int = Field(4, ge=1, le=256)
    # Requests in flight per server at most (HTTP connections, gRPC requests per stream follow);
    # unset: build.max_batch_size, what one server batches at once. Below frontends x
    # clients_per_frontend, fewer clients run (each holds at least one request).
    max_in_flight: Optional[int] = Field(None, ge=1, le=65536)
    # Streamed responses. Unset: Server/Interactive stream, Offline does not. true in Offline: a closed-loop
    # run (max_in_flight) whose TTFT and inter-token latency the client measures (LoadGen's Offline has none).
    stream: Optional[bool] = None
    warmup_queries: int = Field(8, ge=0)
    request_timeout_s: float = Field(300, gt=0)  # for outputs up to 1024 tokens; scaled beyond (measure.py)
    # A server that crashes mid-measurement is relaunched and the measurement started over, this many
    # times per stage (0: fail at once). Recorded in run.json and the result; in no cache key.
    server_relaunches: int = Field(2, ge=0, le=5)
    # Nodes of the serving layout's allocation (indexes) that run the frontends, round-robin; the
    # LoadGen driver stays one process on the measuring node and feeds them over TCP. Empty: every
    # frontend on the measuring node.
    client_nodes: list[Annotated[int, Field(ge=0, le=1023)]] = []
    # What the client holds of one answer at most (harness/untrusted/limits.py: the defaults fit 32,768
    # streamed tokens twice over); more fails that request, naming the field. In no cache key.
    max_response_bytes: int = Field(limits.MAX_RESPONSE_BYTES, ge=1 << 20, le=(1 << 31) - 1)  # one response
    max_event_bytes: int = Field(limits.MAX_EVENT_BYTES, ge=1 << 16, le=(1 << 31) - 1)  # one server-sent event

    @model_validator(mode="after")
    def _event_within_response(self):
        if self.max_event_bytes > self.max_response_bytes:
            raise ValueError(f"max_event_bytes={self.max_event_bytes} is more than max_response_bytes="
                             f"{self.max_response_bytes}: an event is part of a response; lower max_event_bytes")
        return self


class LoadgenSection(Section):
    scenario: Literal[SCENARIOS] = "Offline"
    # Offline: LoadGen issues expected_qps x min_duration samples at once; set it at or above
    # what the system sustains, or the run ends early and is INVALID. "auto": measured by a short
    # sizing run before the timed one, times a margin (harness/loadgen/measure.py).
    # 600.0, not 600: a file's 600 validates to 600.0, and the default must key the same
    offline_expected_qps: Union[Annotated[float, Field(gt=0)], Literal["auto"]] = 600.0
    server_target_qps: float = Field(20, gt=0)
    # SingleStream: the latency one query is expected to take; LoadGen generates 2 x min_duration /
    # this many queries (harness/loadgen/settings.py). Unset: mlperf.conf's 10 ms. "auto": measured by a
    # short probe run before the timed one (harness/loadgen/measure.py), so the run lasts min_duration
    # whether the host is quiet or busy.
    single_stream_expected_latency_ms: Union[Annotated[float, Field(gt=0)], Literal["auto"], None] = None
    min_duration_ms: int = Field(10_000, ge=0)
    min_query_count: int = Field(64, ge=1)
    performance_sample_count: int = Field(0, ge=0)  # 0: the whole dataset
    # Unset: MLPerf's constraints for `mlperf_model` and the scenario (LoadGen's mlperf.conf).
    ttft_latency_ms: Optional[float] = Field(None, gt=0)
    tpot_latency_ms: Optional[float] = Field(None, gt=0)
    # The MLPerf benchmark (harness/mlperf/benchmarks/): its latency limits, LoadGen name, sample
    # counts, scorer and gates. MLPerf's and LoadGen's spellings are accepted (llama3_1-405b).
    mlperf_model: str = "llama2-70b"
    # The MLPerf round whose rules apply: which benchmarks and accuracy targets exist, LoadGen's seeds.
    round: Literal["v5.1", "v6.0", "v6.1"] = "v6.1"
    max_duration_ms: int = Field(0, ge=0)  # 0: no cap
    seed: int = 0

    @field_validator("mlperf_model")
    @classmethod
    def _known_benchmark(cls, v: str) -> str:
        if benchmarks.canonical_name(v) is None:
            raise ValueError(f"unknown MLPerf benchmark {v!r}; one of {', '.join(benchmarks.REGISTRY)} "
                             "(or their LoadGen names, e.g. llama3_1-405b)")
        return v


class SyntheticSection(Section):
    """dataset.format=synthetic (harness/model/synthetic.py): lengths ~ Normal(mean, sd), seeded."""

    # The defaults fit the CPU default's engine (build.max_input_len 128, dataset.max_new_tokens 32).
    isl_mean: float = Field(64, ge=1)
    isl_sd: float = Field(0, ge=0)
    osl_mean: float = Field(32, ge=2)
    osl_sd: float = Field(0, ge=0)
    # Every prompt starts with one of prefix_groups shared prefixes of prefix_tokens tokens (in the ISL).
    prefix_tokens: int = Field(0, ge=0)
    prefix_groups: int = Field(1, ge=1, le=1 << 20)
    seed: int = 0


def _synthetic_fits(d) -> None:
    """Synthetic lengths the dataset's settings can hold: outputs under the cap, prompts beyond their prefix."""
    s = d.synthetic
    if s.osl_mean + 3 * s.osl_sd > d.max_new_tokens:
        need = int(-(-(s.osl_mean + 3 * s.osl_sd) // 1))
        raise ValueError(f"dataset.max_new_tokens {d.max_new_tokens} would cut synthetic output lengths "
                         f"(osl_mean + 3 osl_sd = {s.osl_mean + 3 * s.osl_sd:g}); set dataset.max_new_tokens={need}")
    if s.prefix_tokens and s.prefix_tokens >= s.isl_mean:
        raise ValueError(f"dataset.synthetic.prefix_tokens {s.prefix_tokens} leaves no room in isl_mean "
                         f"{s.isl_mean:g}; shared prefixes are part of the input length")


class DatasetSection(Section):
    # "builtin": prompts cut from the shipped corpus; "synthetic": made here (dataset.synthetic);
    # otherwise a file of the given format.
    name: str = "builtin"
    path: Optional[str] = None
    format: Literal["builtin", "mlperf_pickle", "jsonl", "synthetic", "librispeech"] = "builtin"
    # librispeech (whisper): where the manifest's fnames are (the reference's --dataset_dir); default: the
    # manifest's directory. An absolute fname stands alone, as os.path.join has it.
    audio_dir: Optional[str] = None
    synthetic: SyntheticSection = SyntheticSection()
    num_samples: int = Field(256, ge=1)
    max_new_tokens: int = Field(32, ge=1)
    # A pickle runs whatever code it holds when loaded: name its sha256, or say you trust it.
    sha256: Optional[str] = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    allow_pickle: bool = False
    # A jsonl line longer than this is refused (validation reads the first lines, the stage every line):
    # the longest MLPerf sample (a 128k-token prompt as text and token ids, with its reference) is under
    # 2 MiB, and one gigabyte-long line made tokenizers abort the process. Enters no key.
    max_line_bytes: int = Field(16 << 20, ge=1024, le=1 << 31)
    # A Hugging Face tokenizer directory that tokenizes the dataset instead of the model's: the
    # dataset then needs no PrepareModel (`pipeline bench` measures a server perfdag did not build).
    tokenizer: Optional[str] = None

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_dir(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        p = Path(v).expanduser()
        if not p.is_dir():
            raise ValueError(f"{v!r} is not a directory; give a Hugging Face tokenizer directory")
        if not any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
            raise ValueError(f"{v!r} holds no tokenizer.json, tokenizer_config.json or "
                             "tokenizer.model; give a Hugging Face tokenizer directory")
        return str(p.resolve())

    @model_validator(mode="after")
    def _path_matches_format(self):
        if self.audio_dir is not None and self.format != "librispeech":
            raise ValueError("audio_dir is only used with format librispeech")
        if self.audio_dir is not None and not Path(self.audio_dir).expanduser().is_dir():
            raise ValueError(f"dataset.audio_dir {self.audio_dir!r} is not a directory; give the directory the "
                             "manifest's fnames are under")
        if self.format in ("builtin", "synthetic"):
            if self.path is not None:
                raise ValueError("path is only used with format mlperf_pickle, jsonl or librispeech")
            if self.format == "synthetic":
                _synthetic_fits(self)
        elif self.path is None:
            raise ValueError(f"format {self.format} needs dataset.path")
        elif kind := not_regular(Path(self.path).expanduser()):  # a FIFO would block the stage, a device never end
            raise ValueError(f"dataset.path {self.path!r} is {kind}, not a regular file; give the dataset file")
        elif not Path(self.path).expanduser().is_file():
            raise ValueError(f"dataset.path {self.path!r} is not a file")
        if self.format == "mlperf_pickle" and not self.sha256 and not self.allow_pickle:
            raise ValueError("format mlperf_pickle loads a Python pickle, which runs whatever code the file holds; "
                             "set dataset.sha256 to the file's sha256 (a file that does not match is refused) or "
                             "dataset.allow_pickle: true if you trust the file")
        if self.sha256 and self.path is not None:
            got = file_sha256(self.path)
            if got != self.sha256.lower():
                raise ValueError(f"dataset.sha256: {self.path} has sha256 {got}, not {self.sha256}; "
                                 "the file changed, or the hash is wrong")
        return self


def _reference_scores_moved(v):
    if isinstance(v, str) and benchmarks.canonical_name(v):
        raise ValueError(f"the benchmark is now loadgen.mlperf_model; set loadgen.mlperf_model: {v} and "
                         "accuracy.reference_scores: mlperf")
    return v


class AccuracySection(Section):
    # Fraction of the reference scores that must be reached (MLPerf: 0.99 or 0.999).
    target: float = Field(0.99, gt=0, le=1)
    # What the scores are compared with. "mlperf": the gates of loadgen.mlperf_model in loadgen.round
    # (MLPerf's reference scores). "self": the dataset's references scored as if they were the
    # outputs (the built-in dataset's references are the unquantized model's greedy outputs).
    # "auto": "self" for the built-in dataset, "mlperf" for a dataset file.
    reference_scores: Annotated[Literal["auto", "mlperf", "self"], BeforeValidator(_reference_scores_moved)] = "auto"
    tokens_per_sample_tolerance: float = Field(0.10, ge=0, le=1)
    num_samples: int = Field(0, ge=0)  # 0: the whole dataset
    # Model-generated code (MBXP, LiveCodeBench) runs in a bubblewrap sandbox (harness/mlperf/codeexec/SANDBOX.md):
    # this many at once, each killed after code_timeout_s. Where the kernel refuses its namespaces it is
    # refused unless allow_code_network allows a weaker mode (the host's network; as root, no namespaces).
    code_workers: int = Field(2, ge=1, le=64)
    code_timeout_s: float = Field(20.0, gt=0, le=600)  # MLCommons' MBXP checker: 20 s
    allow_code_network: bool = False
    # LiveCodeBench rows (deepseek-r1, gpt-oss-120b) run the extracted program against the problem's
    # tests, read from a LOCAL copy of livecodebench/code_generation_lite (JSON lines: question_id,
    # public_test_cases, private_test_cases, metadata; harness/mlperf/codeexec/livecodebench.py); nothing is
    # downloaded. Required when the dataset has LiveCodeBench rows.
    livecodebench_problems: Optional[str] = None
    livecodebench_timeout_s: float = Field(60.0, gt=0, le=600)  # per test; MLCommons' eval_accuracy.py: 60


class SearchSection(Section):
    """FindMaxLoad (`python -m pipeline search`): the highest load that stays VALID or meets `slo`,
    bracketed from `start` by `growth`, then bisected until the bracket is within `tolerance`."""

    # Empty: LoadGen's verdict (MLPerf's latency limits, early stopping); else e.g. "ttft_p99_ms<=500".
    slo: str = ""
    # auto: server_target_qps in Server/Interactive, harness.max_in_flight (closed loop) in Offline.
    axis: Literal["auto", "server_target_qps", "max_in_flight"] = "auto"
    start: Optional[float] = Field(None, gt=0)  # unset: the params' own value of the axis
    lowest: float = Field(0.1, gt=0)  # below this the search gives up: nothing passes
    highest: float = Field(100_000, gt=0)  # above this it stops growing: everything passes
    growth: float = Field(2.0, gt=1, le=100)
    tolerance: float = Field(0.02, gt=0, lt=1)  # the bracket's width over its low end
    # A probe is a shorter run: its own LoadGen duration and query count (each probe is a RunLoadgen).
    probe_min_duration_ms: int = Field(5000, ge=0)
    probe_min_query_count: int = Field(512, ge=1)
    # The noise rule: a load whose first probe's worst statistic lies within `noise` of its limit (either
    # side) is near the knee and run `repeats` times in all (other LoadGen seeds; `search --repeat`); it
    # passes only if all pass. A load whose runs disagree is tried again, `retries` more runs per search.
    noise: float = Field(0.1, ge=0, lt=1)
    repeats: int = Field(3, ge=1, le=10)
    retries: int = Field(3, ge=0, le=100)
    max_probes: int = Field(30, ge=1, le=1000)
    confirm: bool = True  # one run at the params' full settings, with accuracy, at the found value
    confirm_tries: int = Field(2, ge=1, le=10)  # where it fails there, the next loads that passed, in all

    @field_validator("slo")
    @classmethod
    def _slo_parses(cls, v: str) -> str:
        try:
            parse_slo(v)
        except SloError as e:
            raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _range(self):
        if self.lowest >= self.highest:
            raise ValueError(f"lowest {self.lowest:g} must be below highest {self.highest:g}")
        return self


_PLAIN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"  # names a directory of the results tree, never a path


class SubmissionSection(Section):
    """`python -m pipeline submission`: who submits, in which division, under which names in
    MLPerf's results tree (<division>/<submitter>/results/<system>/<benchmark>/<Scenario>/)."""

    # open: any model (the CPU default's tiny Llama is not the reference); closed: the reference
    # model under the closed rules; network: closed, served over a network.
    division: Literal["open", "closed", "network"] = "open"
    submitter: str = Field("", pattern=r"^(|[A-Za-z0-9][A-Za-z0-9_.-]{0,99})$")  # your organisation; required to submit
    system: str = Field("perfdag_system", pattern=_PLAIN_NAME)  # systems/<system>.json, results/<system>/
    system_name: str = ""  # systems/<system>.json "system_name"; empty: `system`
    benchmark: str = Field("llama2-70b-99.9", pattern=_PLAIN_NAME)  # MLPerf's name, or your own with maps_to
    maps_to: Optional[str] = Field(None, pattern=_PLAIN_NAME)  # open: the MLPerf benchmark `benchmark` stands for

    @model_validator(mode="after")
    def _mapping_is_open_only(self):
        if self.maps_to and self.division != "open":
            raise ValueError(f"maps_to is read (as model_mapping.json) only in the open division, not {self.division}; "
                             "name the benchmark by its MLPerf name (e.g. llama2-70b-99.9) and drop maps_to")
        if ".." in self.system or ".." in self.benchmark:
            raise ValueError("system and benchmark name directories: no '..'")
        return self


# Stages whose build may run as a Slurm job: they write one artifact and keep nothing running.
# LaunchServers and the measuring stages run in one allocation instead (slurm.serve).
SLURM_STAGES = ("PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "PrepareDataset", "CheckAccuracy")
GPU_STAGES = (*SLURM_STAGES, "LaunchServers")  # gpus_per_stage: LaunchServers sizes the serving allocation


class SlurmSection(Section):
    """Where set, stages in `stages` run as Slurm jobs (tasks/slurm/submit.py). Never enters a key:
    where a stage ran does not change what it made."""

    stages: list[Literal[SLURM_STAGES]] = list(SLURM_STAGES)  # type: ignore[valid-type]
    partition: str = Field("", pattern=r"^[A-Za-z0-9_.,-]*$")  # empty: the cluster's default
    account: str = Field("", pattern=r"^[A-Za-z0-9_.-]*$")
    gpus: int = Field(0, ge=0, le=64)  # per job (sbatch --gpus); the job sees CUDA_VISIBLE_DEVICES
    gpus_per_stage: dict[str, int] = {}  # e.g. {BuildEngine: 1}: wins over gpus for that stage
    cpus: int = Field(1, ge=1, le=1024)  # --cpus-per-task
    mem: str = Field("", pattern=r"^(\d+[KMGT]?)?$")  # --mem, e.g. 16G; empty: the partition's default
    # --time in minutes (a number: 2:00:00 is text in YAML 1.2, refused here); 0: the partition's default.
    time_limit_min: int = Field(0, ge=0, le=525_600)
    extra_args: list[str] = []  # more sbatch options, e.g. ["--constraint=h100", "--exclusive"]
    # pyxis/enroot: the stage runs in this image (srun --container-image), with the artifacts root
    # and this checkout mounted at their own paths; the image must hold perfdag's Python stack.
    container_image: str = ""
    container_mounts: list[str] = []  # more mounts, "src:dst"
    # Slurm's own OCI support: stages and every layout step run under `srun --container=<bundle>` (an
    # OCI bundle directory on every node, run by oci.conf's runtime, e.g. crun); its config.json must
    # bind-mount the checkout and the artifacts root at their own paths (harness/slurm/oci.py).
    container_bundle: str = ""
    poll_s: float = Field(2.0, gt=0, le=600)  # how often squeue/scontrol are asked
    # LaunchServers holds an allocation (a job that keeps the servers) and the measuring stages of
    # the point run in it (srun --overlap); false: both run in the luigi worker's process.
    serve: bool = True
    # A Sweep submits its points as one job array, each task a point's whole FullRun on its node;
    # at most max_parallel tasks run at once (--array=0-N%max_parallel). false: points run from the worker.
    array: bool = True
    max_parallel: int = Field(4, ge=1, le=10_000)

    @field_validator("gpus_per_stage")
    @classmethod
    def _known_stages(cls, v: dict[str, int]) -> dict[str, int]:
        bad = [k for k in v if k not in GPU_STAGES]
        if bad:
            raise ValueError(f"gpus_per_stage names {bad}; stages that run as jobs or hold an allocation are "
                             f"{', '.join(GPU_STAGES)}")
        if any(n < 0 for n in v.values()):
            raise ValueError("gpus_per_stage: counts must be >= 0")
        return v

    @field_validator("extra_args", "container_mounts")
    @classmethod
    def _no_control_chars(cls, v: list[str]) -> list[str]:
        if any(any(ord(c) < 32 for c in a) for a in v):
            raise ValueError("arguments must not hold newlines or control characters")
        return v

    @field_validator("container_bundle")
    @classmethod
    def _usable_bundle(cls, v: str) -> str:
        if v:
            check_bundle_here(v, sees=(CHECKOUT,))
        return v

    @model_validator(mode="after")
    def _one_container(self) -> "SlurmSection":
        if self.container_bundle and self.container_image:
            raise ValueError("slurm.container_image (pyxis/enroot) and slurm.container_bundle (Slurm's OCI support) "
                             "both set: a step runs in one container; keep one of them")
        if self.container_bundle and self.container_mounts:
            raise ValueError("slurm.container_mounts is for slurm.container_image (pyxis); an OCI bundle "
                             "(slurm.container_bundle) takes its mounts from its config.json: add them there")
        return self

    def gpus_for(self, stage: str) -> int:
        return self.gpus_per_stage.get(stage, self.gpus)


class TrtllmWhisperSection(Section):
    """build.backend=trtllm for whisper: TensorRT-LLM's Whisper example (convert_checkpoint.py, an encoder and a
    decoder engine) behind Triton's whisper_bls model (harness/backends/trtllm/whisper.py). Rendered and checked,
    not run. The three paths are None until set, so a missing one is named before anything runs."""

    checkpoint: Optional[str] = None     # OpenAI's checkpoint file <dir>/<name>.pt (large-v3.pt): what convert_checkpoint.py reads
    assets_dir: Optional[str] = None     # holds multilingual.tiktoken and mel_filters.npz, which whisper_bls/1/ needs
    bls_model_dir: Optional[str] = None  # TensorRT-LLM's triton_backend/all_models/whisper/whisper_bls/1 (model.py, ...)
    weight_only_precision: Literal["none", "int8", "int4"] = "none"  # convert_checkpoint.py --use_weight_only
    max_beam_width: int = Field(1, ge=1, le=64)
    decoder_max_input_len: int = Field(14, ge=1)   # the decoder prompt (text prefix) tokens
    decoder_max_seq_len: int = Field(114, ge=2)    # prompt + generated tokens
    cross_kv_cache_fraction: float = Field(0.5, gt=0, lt=1)
    zero_pad: bool = False
    bls_instances: int = Field(8, ge=1, le=256)
    text_prefix: str = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"


class Params(Section):
    model: ModelSection = ModelSection()
    quantize: QuantizeSection = QuantizeSection()
    build: BuildSection = BuildSection()
    runtime: RuntimeSection = RuntimeSection()
    triton: TritonSection = TritonSection()
    openai: OpenAISection = OpenAISection()
    harness: HarnessSection = HarnessSection()
    loadgen: LoadgenSection = LoadgenSection()
    dataset: DatasetSection = DatasetSection()
    accuracy: AccuracySection = AccuracySection()
    submission: SubmissionSection = SubmissionSection()
    sessions: SessionsSection = SessionsSection()
    search: SearchSection = SearchSection()
    slurm: Optional[SlurmSection] = None  # unset: every stage runs in the luigi worker's process
    layout: Optional[LayoutSection] = None  # unset: the servers of the server section, on one node
    trtllm_whisper: Optional[TrtllmWhisperSection] = None  # whisper's Triton form (rendered only)


SECTIONS = tuple(Params.model_fields)
