"""Strict parsing, tried as an adversary and as an unlucky user would: YAML 1.2 (no sexagesimal numbers,
no yes/no booleans), flag strings typed only when the whole value is a number, special files and huge
files refused by name before any stage, a dataset that would exhaust memory failing with one line that
run.json records, look-alike keys named by their characters, and every serving field of the backend's
own section in the LaunchServers key (issue 27, items 7, 8, 9, 11, 16)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import REPO, run_luigi, run_records
from luigi.task_register import Register

from harness.backends import resolve
from harness.cache.signing import load_key
from harness.config import ParamsError
from harness.config.resolve import parse_env_flags
from harness.errors import InputError
from harness.model.datasets import DatasetError, load_dataset
from harness.untrusted import yamlio

DEFAULT = REPO / "params" / "default.yaml"
OPENAI = REPO / "params" / "examples" / "openai-cpu.yaml"


def refused(*, params_file=None, overrides="", env=None, needles=()) -> str:
    """resolve() refuses; every needle is in the message, which has no traceback and no 'allowed:' list."""
    with pytest.raises(ParamsError) as e:
        resolve(params_file, overrides, env=env or {})
    text = str(e.value)
    for needle in needles:
        assert needle in text, text
    return text


def cli(root, *args, env=None, timeout=60) -> subprocess.CompletedProcess:
    """`python -m pipeline status` in a subprocess: a hang is a test failure after `timeout`, not a stuck suite."""
    return subprocess.run([sys.executable, "-m", "pipeline", "status", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PERFDAG_ARTIFACTS": str(root), **(env or {})})


def cli_refused(proc, *needles) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    for needle in needles:
        assert needle in out, out[-2000:]
    assert "Traceback" not in out and len(out) < 5000, out[-2000:]


def unix_socket(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    os.chmod(path, 0o600)
    return s


def private_zero_device(path) -> bool:
    """A 0600 character device reading like /dev/zero (root only): refused for what it is, also by a
    rule that refuses keys others can read."""
    try:
        os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))
        return True
    except OSError:
        return False


# --- YAML 1.2: sexagesimal numbers and yes/no are text, refused by a number or boolean field ---------------

@pytest.mark.parametrize("section,key,value", [
    ("loadgen", "min_duration_ms", "10:00"),       # YAML 1.1: 600
    ("loadgen", "server_target_qps", "1:30.5"),    # YAML 1.1: the float 90.5
    ("build", "max_batch_size", "-1:00"),           # YAML 1.1: -60
    ("slurm", "time_limit_min", "2:00:00"),         # YAML 1.1: 7200
])
def test_a_sexagesimal_number_in_a_params_file_is_refused_naming_the_field(tmp_path, section, key, value):
    """`10:00` in a params file is the text '10:00' (YAML 1.2), refused by the number field it is given
    to, with the field named and what YAML 1.1 would have made of it; never silently 600."""
    f = tmp_path / "p.yaml"
    f.write_text(f"extends: {DEFAULT}\n{section}:\n  {key}: {value}\n")
    text = refused(params_file=f, needles=(f"{section}.{key}", repr(value), "YAML 1.2", "write a plain number"))
    assert len(text.splitlines()) == 2, text


def test_a_sexagesimal_number_in_overrides_is_refused_and_the_cli_says_so_in_one_line(tmp_path):
    """--overrides values are typed by the same YAML 1.2 rules: loadgen.min_duration_ms=10:00 is refused,
    in the CLI too, with one line and no traceback."""
    refused(overrides="loadgen.min_duration_ms=10:00", needles=("loadgen.min_duration_ms", "'10:00'"))
    cli_refused(cli(tmp_path / "a", "--overrides", "loadgen.min_duration_ms=10:00"), "loadgen.min_duration_ms",
                "'10:00'")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("text,value", [("0o17", 15), ("017", 17), ("0x10", 16), ("+64", 64)])
def test_integers_follow_yaml_1_2_octal_only_as_0o(text, value):
    """Octal is 0o17 only: 017 is decimal 17 (YAML 1.1 made it 15), hex stays hex."""
    assert resolve(None, f"build.max_batch_size={text}", env={}).build.max_batch_size == value
    assert yamlio.loads(f"a: {text}") == {"a": value}


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "Yes", "OFF"])
def test_yes_no_on_off_are_text_refused_by_a_boolean_field(tmp_path, word):
    """yes/no/on/off are strings in YAML 1.2: a boolean field refuses them (file and --overrides) and
    says to write true or false; a string field keeps the word."""
    f = tmp_path / "p.yaml"
    f.write_text(f"extends: {DEFAULT}\nruntime:\n  enable_chunked_context: {word}\n")
    refused(params_file=f, needles=("runtime.enable_chunked_context", repr(word)))
    text = refused(overrides=f"accuracy.allow_code_network={word}", needles=("accuracy.allow_code_network",))
    if word.lower() in ("yes", "no", "on", "off"):  # y is text in YAML 1.1 too: no hint then
        assert "write true or false" in text, text
    assert resolve(None, f"model.name={word}", env={}).model.name == word


def test_yaml_1_1_only_forms_are_text_and_1_2_floats_are_numbers():
    """Dates, 1_000, 0b101, `<<` and `=` are text; 1e-3 (no dot), .5 and 1. are floats; ~ and an empty
    value are null."""
    doc = yamlio.loads("a: 2024-01-01\nb: 1_000\nc: 0b101\nd: =\ne: 1e-3\nf: .5\ng: 1.\nh: ~\ni:\n<<: {x: 1}\n")
    assert doc == {"a": "2024-01-01", "b": "1_000", "c": "0b101", "d": "=", "e": 0.001, "f": 0.5, "g": 1.0,
                   "h": None, "i": None, "<<": {"x": 1}}


@pytest.mark.parametrize("value", ["10:00", "yes", "0o17", "1e3", "017", "2024-01-01", "null", "", "true"])
def test_a_sweep_point_string_reaches_the_overrides_unchanged(value):
    """A sweep point's string value is written into --overrides quoted wherever YAML 1.2 or 1.1 would
    read it as something else, so it reaches the parameters as the same string."""
    from harness.config.resolve import parse_overrides
    from harness.config.sweeps import SweepFile, point_overrides

    sweep = SweepFile(points=[{"model.name": value}])
    parsed, problems = parse_overrides(point_overrides(sweep, sweep.points[0]))
    assert not problems and parsed == [(["model", "name"], value)]


# --- flag strings: typed only when the whole value is one ---------------------------------------------

@pytest.mark.parametrize("var,item,field", [
    ("TRTLLM_BUILD_FLAGS", "max_batch_size:1:2", "build.max_batch_size"),       # YAML 1.1: 62
    ("TRTLLM_BUILD_FLAGS", "tensor_parallelism:1:00", "build.tp_size"),         # an alias of a field
    ("TRTLLM_CHECKPOINT_FLAGS", "calib_size:1:00", "quantize.calib_size"),
    ("TRTLLM_RUNTIME_FLAGS", "max_queue_delay_microseconds:10:00", "runtime.max_queue_delay_microseconds"),
    ("TRTLLM_RUNTIME_FLAGS", "enable_chunked_context:yes", "runtime.enable_chunked_context"),
    ("TRTLLM_BUILD_FLAGS", "max_batch_size:64abc", "build.max_batch_size"),
])
def test_a_flag_value_that_is_not_wholly_a_number_is_refused_naming_the_variable_and_key(var, item, field):
    """TRTLLM_BUILD_FLAGS=max_batch_size:1:2 is the text '1:2' (never the sexagesimal 62), refused by the
    field's type with the variable, the item and the field named; in each of the three variables."""
    key, _, value = item.partition(":")
    refused(env={var: item}, needles=(f"{var} item {key}:{value} sets {field}", repr(value)))


def test_flag_values_are_typed_by_the_whole_value():
    """64 -> int, 0.5 / 1e-3 -> float, true -> bool; '1:2', 'enable', '[64]', 'null' stay text."""
    flags, problems = parse_env_flags("TRTLLM_BUILD_FLAGS", "a:64,b:0.5,c:1e-3,d:true,e:1:2,f:enable,g:[64],h:null,i:0o17")
    assert not problems
    assert flags == {"a": 64, "b": 0.5, "c": 0.001, "d": True, "e": "1:2", "f": "enable", "g": "[64]", "h": "null",
                     "i": 15}
    assert type(flags["a"]) is int and type(flags["d"]) is bool
    p = resolve(None, "", env={"TRTLLM_BUILD_FLAGS": "max_batch_size:64", "TRTLLM_CHECKPOINT_FLAGS": "calib_size:8",
                               "TRTLLM_RUNTIME_FLAGS": "exclude_input_from_output:false"})
    assert p.build.max_batch_size == 64 and p.quantize.calib_size == 8 and p.runtime.exclude_input_in_output is False


def test_an_override_beats_a_bad_flag_and_is_named_itself():
    """An override of the field a flag set wins (no error for the flag); a bad override is named as
    the override, not as the variable it replaced."""
    p = resolve(None, "build.max_batch_size=8", env={"TRTLLM_BUILD_FLAGS": "max_batch_size:1:2"})
    assert p.build.max_batch_size == 8
    text = refused(overrides="build.max_batch_size=1:2", env={"TRTLLM_BUILD_FLAGS": "max_batch_size:16"},
                   needles=("build.max_batch_size",))
    assert "TRTLLM_BUILD_FLAGS" not in text, text


# --- special files and sizes: refused by name, never waited on -------------------------------------

def test_a_fifo_device_socket_or_huge_file_as_signing_key_is_refused_without_hanging(tmp_path):
    """A FIFO key file would block perfdag forever, /dev/zero never ends: each (and a socket, a 0600
    character device, a 100 kB file) is refused with one line naming the path, within seconds."""
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo, 0o600)
    big = tmp_path / "big.key"
    big.write_bytes(os.urandom(100_000))
    big.chmod(0o600)
    sock = tmp_path / "key.sock"
    keep = unix_socket(sock)
    cases = [(fifo, "is a FIFO"), (sock, "is a socket"), (big, "100000 bytes, more than the 4096")]
    if private_zero_device(tmp_path / "zero"):
        cases.append((tmp_path / "zero", "is a character device"))
    try:
        for path, why in cases:
            with pytest.raises(InputError, match=why):
                load_key(path)
        for path, why in [(fifo, "is a FIFO"), (big, "more than the 4096")]:
            t0 = time.monotonic()
            cli_refused(cli(tmp_path / "a", env={"PERFDAG_SIGNING_KEY_FILE": str(path)}), f"signing key file {path}", why)
            assert time.monotonic() - t0 < 30
        proc = cli(tmp_path / "a", env={"PERFDAG_SIGNING_KEY_FILE": "/dev/zero"})  # refused; the reason may also be its mode
        cli_refused(proc, "signing key file /dev/zero")
    finally:
        keep.close()
    assert not (tmp_path / "a").exists()


def test_a_fifo_device_socket_or_huge_file_as_params_file_is_refused(tmp_path):
    """--params-file, an `extends:` target, a sweep file and a system description: a FIFO, /dev/zero, a
    socket or a file over 1 MiB is refused by name before anything is read from it."""
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    sock = tmp_path / "p.sock"
    keep = unix_socket(sock)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: p.fifo\n")
    try:
        for path, why in [(fifo, "is a FIFO"), ("/dev/zero", "is a character device"), (sock, "is a socket"),
                          (big, "more than the 1048576"), (child, "is a FIFO")]:
            refused(params_file=path, needles=(why,))
        cli_refused(cli(tmp_path / "a", "--params-file", str(fifo)), str(fifo), "is a FIFO")

        from harness.config.sweeps import SweepError, load_sweep
        from harness.mlperf.system_desc import load_user_yaml
        with pytest.raises(SweepError, match="sweep file .*is a FIFO"):
            load_sweep(fifo)
        with pytest.raises(InputError, match="system file /dev/zero: is a character device"):
            load_user_yaml("/dev/zero")
        with pytest.raises(InputError, match="more than the 1048576"):
            load_user_yaml(big)
    finally:
        keep.close()


def test_a_fifo_device_or_socket_as_dataset_is_refused(tmp_path):
    """dataset.path as a FIFO (which would block the stage), /dev/zero (which never ends) or a socket is
    refused with one line naming it, in validation and in the loader; a FIFO tokenizer.json in a
    checkpoint likewise."""
    fifo = tmp_path / "d.fifo"
    os.mkfifo(fifo)
    sock = tmp_path / "d.sock"
    keep = unix_socket(sock)
    try:
        for path, why in [(fifo, "is a FIFO"), ("/dev/zero", "is a character device"), (sock, "is a socket")]:
            refused(overrides=f"dataset.format=jsonl,dataset.path={path}", needles=(f"dataset.path '{path}'", why))
            with pytest.raises(DatasetError, match=why):
                load_dataset("jsonl", path, None, 1)
        cli_refused(cli(tmp_path / "a", "--overrides", f"dataset.format=jsonl,dataset.path={fifo}"), "is a FIFO")
    finally:
        keep.close()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "llama"}))
    os.mkfifo(ckpt / "tokenizer.json")
    cli_refused(cli(tmp_path / "a", "--overrides", f"model.checkpoint={ckpt}"), "tokenizer.json: is a FIFO")


# --- datasets: bounded lines, memory -------------------------------------------------------------------

def _jsonl_line(nbytes: int) -> bytes:
    """One valid sample line of exactly `nbytes` bytes before its newline."""
    head, tail = b'{"input_ids": [1, 2, 3], "output": "', b'"}'
    return head + b"a" * (nbytes - len(head) - len(tail)) + tail


def test_a_one_gigabyte_line_is_refused_in_validation_quickly_and_without_reading_it(tmp_path):
    """A 1 GB single-line JSONL dataset (sparse here) is refused in validation naming
    dataset.max_line_bytes (16 MiB by default), in seconds and without reading the gigabyte (the issue
    measured 9.6 s and 3 GB of RSS, then an aborted process)."""
    f = tmp_path / "huge.jsonl"
    with open(f, "wb") as out:
        out.write(b'{"input": "')
        out.truncate(1 << 30)
    t0 = time.monotonic()
    proc = cli(tmp_path / "a", "--overrides", f"dataset.format=jsonl,dataset.path={f}")
    took = time.monotonic() - t0
    cli_refused(proc, f"jsonl {f} line 1: longer than dataset.max_line_bytes=16777216 bytes")
    assert took < 30, took
    assert not (tmp_path / "a").exists()
    # The peak of this process' own memory (VmHWM): ru_maxrss would also count the forked pytest worker's
    # memory from before exec (Linux carries it over), which is large when the worker has loaded torch.
    peak = subprocess.run([sys.executable, "-c", (
        "import re\nfrom harness.config import ParamsError, resolve\n"
        f"try: resolve(None, 'dataset.format=jsonl,dataset.path={f}', env={{}})\n"
        "except ParamsError: print(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))")],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert peak.stdout.strip() and int(peak.stdout) < 400_000, (peak.stdout, peak.stderr[-2000:])  # KiB


def test_the_line_limit_is_exact_and_a_setting(tmp_path):
    """A line of exactly dataset.max_line_bytes bytes (newline not counted) passes; one byte more is
    refused; raising the setting admits it. The setting enters no key."""
    f = tmp_path / "d.jsonl"
    f.write_bytes(_jsonl_line(2048) + b"\n")
    base = "dataset.format=jsonl,dataset.num_samples=1,accuracy.target=0.999,dataset.path=" + str(f)
    resolve(None, base + ",dataset.max_line_bytes=2048", env={})
    refused(overrides=base + ",dataset.max_line_bytes=2047", needles=("line 1: longer than dataset.max_line_bytes=2047",))
    assert len(load_dataset("jsonl", f, None, 1, max_line_bytes=2048)) == 1
    with pytest.raises(DatasetError, match="line 1: longer than dataset.max_line_bytes=2047"):
        load_dataset("jsonl", f, None, 1, max_line_bytes=2047)
    from tasks.base import select
    assert "max_line_bytes" not in select(resolve(None, base, env={}), ("dataset",))["dataset"]


def test_deeply_nested_json_is_a_dataset_error_not_a_traceback(tmp_path):
    """A line of 100,000 nested brackets is refused as 'nested too deeply', in validation and loading."""
    f = tmp_path / "d.jsonl"
    f.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    refused(overrides=f"dataset.format=jsonl,dataset.path={f}", needles=("line 1: JSON nested too deeply",))
    with pytest.raises(DatasetError, match="nested too deeply"):
        load_dataset("jsonl", f, None, 1)


def test_a_dataset_that_would_not_fit_in_memory_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """Loading stops with one line saying how much memory the samples would need and how much is
    available, before reading past what fits (not killed by the kernel or aborted by a native library)."""
    import harness.model.datasets as datasets

    f = tmp_path / "d.jsonl"
    f.write_bytes(b"".join(_jsonl_line(10_000) + b"\n" for _ in range(100)))
    monkeypatch.setattr(datasets, "_available_memory", lambda: 500_000)  # room for ~5 such lines
    with pytest.raises(DatasetError, match=r"its first 5 lines hold 50005 bytes; .* about 0.5 MiB, more than the 0.5 MiB available"):
        load_dataset("jsonl", f, None, 100)
    monkeypatch.undo()
    assert len(load_dataset("jsonl", f, None, 100)) == 100


def test_a_long_line_past_validation_fails_the_stage_records_it_and_leaves_no_temp_dir(tmp_path):
    """Validation reads the first 64 lines; a too-long line 70 fails PrepareDataset itself with one line
    naming the file, line and setting: run.json records the failure and no .tmp-* directory is left."""
    f = tmp_path / "d.jsonl"
    good = json.dumps({"input_ids": [1, 2, 3, 4], "output": "a b"}).encode() + b"\n"
    f.write_bytes(good * 69 + _jsonl_line(5000) + b"\n")
    root = tmp_path / "artifacts"
    proc = run_luigi("PrepareDataset", "--overrides", f"model.tiny.train_steps=0,dataset.format=jsonl,dataset.path={f},"
                     "dataset.num_samples=70,dataset.max_line_bytes=4096,accuracy.target=0.999",
                     artifacts=root, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    why = f"jsonl {f} line 70: longer than dataset.max_line_bytes=4096 bytes"
    assert why in out, out[-3000:]
    failed = [e for r in run_records(root) for e in (r.get("failed") or {}).values()]
    assert [e["stage"] for e in failed] == ["PrepareDataset"] and why in failed[0]["error"], failed
    assert not list(root.glob("*/.tmp-*")), list(root.glob("*/.tmp-*"))


# --- look-alike keys ------------------------------------------------------------------------------------

CYR_A = "\u0430"  # CYRILLIC SMALL LETTER A


def test_a_homoglyph_key_is_named_by_its_characters_and_the_key_it_resembles(tmp_path):
    """A Cyrillic 'а' in max_batch_size: the error names U+0430 and its position and the ASCII key it
    looks like, instead of an allowed list whose names look identical."""
    f = tmp_path / "p.yaml"
    f.write_text(f"extends: {DEFAULT}\nbuild:\n  m{CYR_A}x_batch_size: 8\n", encoding="utf-8")
    text = refused(params_file=f, needles=("U+0430 CYRILLIC SMALL LETTER A at position 2", "'max_batch_size'"))
    assert "allowed:" not in text, text


@pytest.mark.parametrize("where,needle", [
    ("override", "U+0430 CYRILLIC SMALL LETTER A at position 2"),
    ("section", "U+0443 CYRILLIC SMALL LETTER U at position 2"),
    ("nested", "U+03BF GREEK SMALL LETTER OMICRON at position 2"),
    ("fullwidth", "U+FF4D FULLWIDTH LATIN SMALL LETTER M at position 1"),
    ("zero-width", "U+200B ZERO WIDTH SPACE at position 10"),
    ("env-flag", "U+0430 CYRILLIC SMALL LETTER A at position 2"),
])
def test_homoglyphs_are_named_wherever_a_key_is_given(tmp_path, where, needle):
    """The same naming in --overrides (key, section, nested key), for full-width letters and zero-width
    spaces, and in a TRTLLM_*_FLAGS key; each says which ASCII name it resembles."""
    case = {"override": ("build.m\u0430x_batch_size=8", {}, "'max_batch_size'"),
            "section": ("b\u0443ild.max_batch_size=8", {}, "'build'"),
            "nested": ("model.tiny.v\u03bfcab_size=512", {}, "'vocab_size'"),
            "fullwidth": ("build.\uff4d\uff41\uff58_batch_size=8", {}, "'max_batch_size'"),
            "zero-width": ("build.max_batch\u200b_size=8", {}, "'max_batch_size'"),
            "env-flag": ("", {"TRTLLM_BUILD_FLAGS": "m\u0430x_batch_size:8"}, "'max_batch_size'")}[where]
    refused(overrides=case[0], env=case[1], needles=(needle, case[2]))


def test_a_non_ascii_key_like_no_known_key_says_names_are_ascii():
    text = refused(overrides="build.\u65e5\u672c=1", needles=("U+65E5", "names are ASCII"))
    assert "looks like" not in text


# --- every serving field of the backend's own section enters the keys ---------------------------------

@pytest.fixture(autouse=True)
def _no_cached_tasks():
    """luigi caches task instances by their parameters: a later module constructing the same task (to see
    it refused, say) must get a new one, not one of these."""
    yield
    Register.clear_instance_cache()


def _keys(overrides: str, params_file=OPENAI) -> tuple[str, str]:
    from pipeline import STAGES

    Register.clear_instance_cache()
    return tuple(STAGES[s](params_file=str(params_file), overrides=overrides).key for s in ("LaunchServers", "RunLoadgen"))


@pytest.mark.parametrize("a,b", [
    ("openai.endpoints=[http://127.0.0.1:5001]", "openai.endpoints=[http://127.0.0.1:5002]"),
    ("openai.endpoints=[127.0.0.1:5001]", "openai.endpoints=[127.0.0.2:5001]"),
    ("openai.endpoints=[127.0.0.1:5001],openai.binary=/bin/a", "openai.endpoints=[127.0.0.1:5001],openai.binary=/bin/b"),
    ("openai.binary=/bin/a", "openai.binary=/bin/b"),
    ("openai.bind=127.0.0.1", "openai.bind=0.0.0.0"),
    ("openai.ports=[5001]", "openai.ports=[5002]"),
    ("openai.endpoints=[127.0.0.1:5001],openai.ports=[5001]", "openai.endpoints=[127.0.0.1:5001],openai.ports=[5002]"),
])
def test_each_openai_serving_field_changes_the_launch_and_measurement_keys(artifacts, a, b):
    """Another endpoint (or binary, bind address, port) is another server: with params/examples/openai-cpu.yaml
    the LaunchServers and RunLoadgen keys differ, so a run never reuses or measures through the first
    server's record; also where endpoints are given and nothing is launched."""
    ka, kb = _keys(a), _keys(b)
    assert ka[0] != kb[0] and ka[1] != kb[1], (a, b)


def test_the_torch_backend_keys_its_own_triton_section(artifacts):
    """Each backend states its own serving fields: the triton backend's endpoints enter its keys (as before)."""
    one = _keys("triton.endpoints=[127.0.0.1:8001]", DEFAULT)
    assert one != _keys("triton.endpoints=[127.0.0.1:8002]", DEFAULT)
    from pipeline import STAGES
    Register.clear_instance_cache()
    reads = STAGES["LaunchServers"](params_file=str(DEFAULT)).key_parts().reads
    assert reads == ("triton.bind", "triton.grpc_ports", "triton.endpoints", "triton.binary"), reads


