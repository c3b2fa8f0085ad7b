"""whisper: whisper-large-v3 transcribing LibriSpeech dev-clean + dev-other, repacked into clips of at
most 30 s (1,633 samples), Offline only, in the datacenter and the edge category (v5.1, v6.0, v6.1).
Numbers from mlcommons/inference at b66003e1: tools/submission/submission_checker/constants.py
("whisper": ("ACCURACY", (100.0 - 2.0671) * 0.99), performance and accuracy sample count 1633,
min-queries Offline 1, models_TEST01), loadgen/mlperf.conf (performance_sample_count_override 1633,
sample_concatenate_permutation 1, use_token_latencies 1, Offline min_query_count 1633) and speech2text/:

- reference_SUT.py: vLLM `LLM(..., max_model_len=448, limit_mm_per_prompt={"audio": 1})`, the
  prompt "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>" with the clip loaded by
  `librosa.load(path, sr=16000)`, `SamplingParams(temperature=0, top_p=1.0, max_tokens=200)`. What it
  returns to LoadGen is not token ids: the text, lower-cased and stripped, each character that is one
  of the 42 `labels` as its index (others dropped), as int64 ('q'); n_tokens is the number of token ids
  vLLM generated (the end token among them).
- accuracy_eval.py: the word error rate of every logged entry against its manifest transcript, both
  normalized by whisper's EnglishTextNormalizer, with helpers.py's concatenation-tolerant alignment;
  prints "Word Error Rate: {wer * 100}%, accuracy={(1 - wer) * 100}%" (the checker's ACCURACY regex).
- README.md: samples are zero-padded to 30 s (no shorter windows).
"""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

_ROUNDS = ("v5.1", "v6.0", "v6.1")
#: The decoder prompt the reference gives vLLM before each clip.
PROMPT = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
#: The reference word error rate, in percent (README "Accuracy Target").
REFERENCE_WER = 2.0671

BENCHMARK = Benchmark(
    name="whisper", loadgen_model="whisper",
    dataset="LibriSpeech dev-clean + dev-other, converted to 16 kHz WAV and repacked per speaker and chapter into "
            "clips of at most 30 s (utils/convert_librispeech.py, utils/repackage_librispeech.py): the manifest "
            "dev-all-repack.json (transcript, files[].fname, original_duration), 1,633 clips",
    columns=("output",),  # the manifest's transcript: the sample's reference text
    scorer="whisper",
    generation=Generation(max_output_tokens=200, greedy=True, stop="the end token, or 200 tokens",
                          prompt_format=f"{PROMPT} and the clip (16 kHz mono, zero-padded to 30 s)"),
    metrics=(Metric("accuracy", 100.0 - REFERENCE_WER),),  # (1 - WER) x 100; gate x 0.99
    targets={r: ("99",) for r in _ROUNDS},
    scenarios={r: ("Offline",) for r in _ROUNDS},
    edge_scenarios={r: ("Offline",) for r in _ROUNDS},
    latency_ms={},  # Offline only: no TTFT/TPOT limits
    compliance=("TEST01",), performance_sample_count=1633, dataset_size=1633,
    min_queries={"Offline": 1},
    aliases=("whisper-large-v3", "whisper-99"),
    notes="every log entry scored (no de-duplication); the log holds characters as label indices (int64), "
          "not token ids; harness/mlperf/scoring/whisper.py",
    api="transcriptions", accuracy_log="labels",
)

#: The reference's alphabet (`labels` in reference_SUT.py, accuracy_eval.py): what reaches LoadGen is each
#: character of the transcription that is one of these, as its index.
LABELS = " abcdefghijklmnopqrstuvwxyz'0123456789$%+-"
_INDEX = {c: i for i, c in enumerate(LABELS)}


def text_to_labels(text: str) -> list[int]:
    """What the reference SUT returns to LoadGen for a transcription: the text lower-cased and stripped
    ("Whisper outputs space in the front and capitalizes things"), each character of LABELS as its index,
    every other character dropped."""
    return [_INDEX[c] for c in text.lower().strip() if c in _INDEX]


def manifest_transcript(text: str) -> str:
    """A manifest transcript as the reference's Manifest reads it: characters outside LABELS dropped
    (upper-case letters too: the converter lower-cases LibriSpeech's transcripts before)."""
    return "".join(c for c in text if c in _INDEX)
