"""Nothing wrong is ever silent (issue 27): every probe that the newcomer review found not OK
(../shared/reviews/newcomer_probes.md, named here by its id) gives one clear line, or the
right behaviour: a damaged checkpoint is refused, two runs cannot lose each other's work,
limits are named before work starts, input comes as people have it, and the Python API
refuses what the command refuses."""

import io
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import tfcourse.cli as cli
import tfcourse.device as device
from tfcourse.checkpoint import load_checkpoint, seal
from tfcourse.cli import CHECKPOINTS, CLASSIFY_CHECKPOINT, LM_CHECKPOINT, MLM_CHECKPOINT, main
from tfcourse.decoding import sample_decode
from tfcourse.inference import classify, complete, predict
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.variants import EncoderClassifierConfig
from tfcourse.vocab import Vocab

QUICK = ["--steps", "5", "--batch-size", "8", "--eval-every", "0", "--eval-size", "20",
         "--no-progress", "--examples", "0", "--threads", "1"]
COMMAND = os.path.join(os.path.dirname(sys.executable), "tfcourse")


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.strip() and "\n" not in err.strip(), err  # one line, no traceback
    return err


# ------------------------------------------------------------------ damaged checkpoints


def _damaged(tmp_path, name, edit):
    """A copy of the shipped classify.pt, edited by edit(state) (or, for edit=None, with
    2,000 bytes flipped in the middle of its embedding's data, as the review did)."""
    path = tmp_path / f"{name}.pt"
    if edit is None:
        data = bytearray(open(CLASSIFY_CHECKPOINT, "rb").read())
        weight = torch.load(CLASSIFY_CHECKPOINT, weights_only=True)["model"]["embed.embedding.weight"]
        start = bytes(data).find(weight.numpy().tobytes()[:256])
        assert start > 0
        for i in range(start + 4000, start + 6000):
            data[i] ^= 0x5A
        path.write_bytes(bytes(data))
    else:
        state = torch.load(CLASSIFY_CHECKPOINT, weights_only=True)
        edit(state)
        torch.save(state, path)
    return str(path)


def _nan(state):  # saved so: its digest is that of the NaN weights
    state["model"]["classifier.weight"][0, 0] = float("nan")
    seal(state)


def _vocab(n):
    def edit(state):
        state["vocab"] = state["vocab"][:n] if n < len(state["vocab"]) else [
            *state["vocab"], *(chr(0x4E00 + i) for i in range(n - len(state["vocab"])))]
        state.pop("weights_sha256")  # as a file written before the digests: the size still counts
        state.pop("sha256")
    return edit


DAMAGED = [  # probe id, edit, what the one line says
    ("C16/P05", None, "is damaged: its weights are not those it was saved with"),
    ("C13/P18", _nan, "is damaged: its weight classifier.weight is not finite"),
    ("C14/P15", _vocab(20), "the vocabulary has 24 tokens but the model's vocab_size is 139"),
    ("C15/P16", _vocab(140), "the vocabulary has 144 tokens but the model's vocab_size is 139"),
]


@pytest.mark.parametrize("probe, edit, message", DAMAGED, ids=[d[0] for d in DAMAGED])
def test_a_damaged_checkpoint_is_refused_naming_the_file(probe, edit, message, tmp_path, capsys):
    path = _damaged(tmp_path, probe.replace("/", "_"), edit)
    with pytest.raises(ValueError, match=message) as error:
        load_checkpoint(path)
    assert path in str(error.value)
    assert main(["classify", "--checkpoint", path, "onsdag"]) == 1
    assert message in one_line_error(capsys) and capsys.readouterr().out == ""


def test_a_damaged_init_is_refused_before_training(tmp_path, capsys, monkeypatch):  # I06
    path = _damaged(tmp_path, "corrupt", None)
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained anyway"))
    assert main(["train", "--task", "classify", "--init", path, "--out",
                 str(tmp_path / "i.pt"), *QUICK]) == 1
    assert "is damaged" in one_line_error(capsys)


def test_the_shipped_checkpoints_carry_the_digest_of_their_weights():
    for name in ("dates", "classify", "mlm", "lm"):
        state = torch.load(os.path.join(CHECKPOINTS, f"{name}.pt"), weights_only=True)
        assert len(state["weights_sha256"]) == 64, name


@pytest.mark.parametrize("device, message", [  # P24, P25
    ("foo", "unknown device 'foo'"),
    pytest.param("cuda", "device 'cuda' is not available on this machine",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
])
def test_a_device_problem_is_named_as_one(device, message):
    with pytest.raises(ValueError, match=message):
        load_checkpoint(CLASSIFY_CHECKPOINT, device=device)


# ------------------------------------------------------------------ runs and their --out


def _refused_at_once(argv, message, capsys, monkeypatch, code=1):
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained anyway"))
    assert main(argv) == code
    assert message in one_line_error(capsys)


def test_train_refusals(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(device, "free_memory", lambda _: 8e9)  # whatever this machine has
    (tmp_path / "file").write_text("not a directory")
    os.mkfifo(tmp_path / "fifo")
    out = ["--out", str(tmp_path / "x.pt")]
    cases = [  # probe id, argv, what the one line says
        ("O06", ["--out", ""], "--out is empty"),
        ("I18", ["--init", "", *out], "--init is empty"),
        ("O05", ["--out", str(tmp_path / "file" / "x.pt")], f"{tmp_path / 'file'} is not a directory"),
        ("O11", ["--out", str(tmp_path / "fifo"), "--overwrite"], "is not a regular file"),
        ("T11", ["--max-len", "100000000", *out], "numbers of fixed tables) needs about 25.6 GB"),
    ]
    for _probe, options, message in cases:
        _refused_at_once(["train", "--task", "copy", *QUICK, *options], message, capsys, monkeypatch)
    assert (tmp_path / "fifo").exists() and not (tmp_path / "fifo").is_file()  # O11: still a pipe


def test_a_max_len_too_short_for_the_task_is_named_with_what_works(tmp_path, capsys, monkeypatch):
    message = "--max-len 5 is too short for --task mlm: its longest example takes"  # M01
    _refused_at_once(["train", "--task", "mlm", "--max-len", "5", "--out", str(tmp_path / "m.pt"),
                      *QUICK], message, capsys, monkeypatch)


def test_the_readme_init_path_from_another_folder_points_to_the_shipped_one(tmp_path, capsys,
                                                                            monkeypatch):  # E10
    monkeypatch.chdir(tmp_path)
    _refused_at_once(["train", "--task", "classify", "--init", "tfcourse/checkpoints/mlm.pt",
                      *QUICK], f"the shipped one is {MLM_CHECKPOINT}", capsys, monkeypatch)


def test_a_second_run_on_the_same_out_is_refused(tmp_path, capsys, monkeypatch):  # CONC
    out = tmp_path / "same.pt"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "same.pt.lock").write_text(str(other.pid))  # a run that is writing it
        _refused_at_once(["train", "--task", "copy", "--out", str(out), *QUICK],
                         f"another run (process {other.pid}) is writing {out}", capsys, monkeypatch)
    finally:
        other.kill()
        other.wait()
    monkeypatch.undo()
    assert main(["train", "--task", "copy", "--out", str(out), *QUICK]) == 0  # a killed run's lock
    assert out.exists() and sorted(os.listdir(tmp_path)) == ["same.pt"]  # no lock left behind


def test_two_runs_started_together_do_not_both_write(tmp_path):  # CONC, as the review ran it
    out = str(tmp_path / "same.pt")
    argv = [COMMAND, "train", "--task", "copy", "--out", out, *QUICK, "--steps", "60"]
    first = subprocess.Popen([*argv, "--seed", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    time.sleep(0.3)
    second = subprocess.run([*argv, "--seed", "2"], capture_output=True, text=True, timeout=300)
    first.communicate(timeout=300)
    codes = sorted([first.returncode, second.returncode])
    if codes == [0, 0]:  # the first one finished before the second started: it took over
        pytest.skip("the first run ended within 0.3 s")
    assert codes == [0, 1]
    loser = second if second.returncode else first
    assert "is writing" in loser.stderr


def test_an_ignored_ctrl_c_stays_ignored(tmp_path):  # N1ign
    argv = [COMMAND, "train", "--task", "copy", "--out", str(tmp_path / "c.pt"), *QUICK]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    time.sleep(0.4)  # while torch loads
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0 and "interrupted" not in err, err


# ------------------------------------------------------------------ limits


@pytest.mark.parametrize("argv, message", [
    (["--temperature", "1e39"], "argument --temperature: must be in [0.001, 1000.0], got 1e39"),  # S05
    (["--seed", "99999999999999999999999"], "argument --seed: must be in [0, 9223372036854775808)"),  # S21
])
def test_sample_names_an_option_out_of_range(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sample", *argv])
    assert exit_.value.code == 2 and message in one_line_error(capsys)


def test_sample_prints_its_text_as_it_comes(capsys, monkeypatch):  # S19
    assert main(["sample", "--samples", "2", "--max-new", "1000000000"]) == 1
    assert "several samples are printed when all are done, so at most 10,000" in \
        one_line_error(capsys)
    printed = []
    real = complete

    def watched(*args, emit, **kwargs):  # what stdout holds when the 5th character comes
        def show(chars):
            emit(chars)
            printed.append(capsys.readouterr().out)
            if len(printed) == 5:
                raise KeyboardInterrupt
        return real(*args, emit=show, **kwargs)

    monkeypatch.setattr(cli, "complete", watched)
    assert main(["sample", "--prompt", "def ", "--max-new", "1000000000"]) == 130
    assert printed[0].startswith("def ") and len(printed[0]) == 5
    assert all(len(p) == 1 for p in printed[1:])


# ------------------------------------------------------------------ input as people have it


def _stdin(monkeypatch, data, encoding="utf-8"):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding=encoding))


def test_standard_input_as_people_have_it(capsys, monkeypatch):
    _stdin(monkeypatch, b"onsdag\r\nkilometer per uur\r\n")  # D_stdin_crlf
    assert main(["classify"]) == 0
    out = capsys.readouterr().out
    assert "\r" not in out and out.startswith("onsdag -> ")
    for command in ("decode", "classify"):  # D_stdin_latin1(_strict), D_stdin_binary_strict
        _stdin(monkeypatch, "May 3, 1999\n21. März 1948\n".encode("latin-1"))
        assert main([command]) == 1
        assert ("standard input is not UTF-8 text (line 2 has the byte 0xe4): convert it first"
                in one_line_error(capsys))
    _stdin(monkeypatch, b"May 3, 1999\n")  # E14
    assert main(["decode", "-"]) == 0
    assert capsys.readouterr().out.startswith("May 3, 1999 -> 1999-05-03")


def test_output_that_cannot_be_written_says_so(capsys, monkeypatch):
    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # E07: PYTHONIOENCODING=ascii
    monkeypatch.setattr(sys, "stdout", ascii_out)
    assert main(["classify", "dolarów amerykańskich"]) == 1
    assert "standard output's encoding (ascii) cannot write '\\xf3': set PYTHONIOENCODING=utf-8" \
        in one_line_error(capsys)
    monkeypatch.setattr(sys, "stdout", None)  # E09: started with >&-
    assert main(["classify", "onsdag"]) == 1
    assert "standard output is closed" in one_line_error(capsys)


def test_output_piped_to_head_ends_quietly():  # E08
    # a text printed as it comes, far longer than the pipe holds: head's exit stops it
    pipe = subprocess.run(f"'{COMMAND}' sample --max-new 1000000 | head -c 10; "
                          "echo status ${PIPESTATUS[0]} >&2", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, timeout=300)
    assert len(pipe.stdout) == 10 and pipe.stdout.startswith("def ")
    assert pipe.stderr.strip() == "status 141", pipe.stderr  # as `yes | head -1`: no message


# ------------------------------------------------------------------ the Python API


@pytest.fixture(scope="module")
def shipped():
    return {name: load_checkpoint(path) for name, path in
            (("classify", CLASSIFY_CHECKPOINT), ("lm", LM_CHECKPOINT))}


def _api_cases(shipped):
    classifier, cvocab, cstate = shipped["classify"]
    lm, lvocab, _ = shipped["lm"]
    classes = cstate["classes"]
    seq2seq = Transformer(TransformerConfig.tiny(12))
    src = torch.randint(4, 12, (2, 7))
    return [  # probe id, call, error, what it says
        ("F11", lambda: seq2seq(src[:, :0], src, None, None), ValueError,
         r"src must be ids of shape \(batch, seq\) with seq >= 1, got \(2, 0\)"),
        ("F12", lambda: seq2seq(src.to("meta"), src, None, None), ValueError,
         "tokens are on meta but the model is on cpu"),
        ("F13", lambda: seq2seq(src.numpy(), src, None, None), TypeError,
         "src must be a torch.Tensor of ids .*, got ndarray"),
        ("F14", lambda: seq2seq([[4, 5]], src, None, None), TypeError,
         "src must be a torch.Tensor of ids .*, got list"),
        ("F42", lambda: predict(seq2seq, ["abc"], Vocab("abc")), ValueError,
         "vocab does not match the model: the vocabulary has 7 tokens but the model's "
         "src_vocab_size is 12"),
        ("F43", lambda: complete(lm, lvocab, "def ", 10, temperature=0), ValueError,
         r"temperature must be a number in \[0.001, 1000\]"),
        ("F44", lambda: complete(lm, lvocab, "def ", 10, temperature=1e39), ValueError,
         r"temperature must be a number in \[0.001, 1000\]"),
        ("F46", lambda: complete(lm, lvocab, "def ", 10, samples=0), ValueError,
         "samples must be an integer >= 1, got 0"),
        ("F47", lambda: complete(lm, lvocab, "日本", 10), ValueError,
         "the prompt has characters the model has never seen: '日本'"),
        ("F50", lambda: classify(classifier, [""], cvocab, classes), ValueError,
         r"texts\[0\] is empty: nothing to classify"),
        ("F52", lambda: classify(classifier, "onsdag", cvocab, classes), TypeError,
         r"texts must be a list of strings, got str \(for one text: \['onsdag'\]\)"),
        ("F53", lambda: classify(lm, ["x"], lvocab, classes), TypeError,
         r"model must be a classifier \(e.g. EncoderClassifier\), got DecoderLM"),
        ("A16", lambda: Transformer(TransformerConfig.tiny(10, d_model=2**20)), ValueError,
         "a Transformer with d_model=1,048,576, .* needs about .* of memory"),
        ("A17", lambda: Transformer(TransformerConfig.tiny(10, max_len=10**9)), ValueError,
         "a Transformer with .*max_len=1,000,000,000.* needs about 256.0 GB of memory"),
        ("A18", lambda: Transformer({"src_vocab_size": 10}), TypeError,
         "config must be a TransformerConfig, got dict"),
        ("A19", lambda: Transformer(EncoderClassifierConfig.tiny(10, 2)), TypeError,
         "config must be a TransformerConfig, got EncoderClassifierConfig"),
        ("sample_decode", lambda: sample_decode(seq2seq, src, None, 5, 1, 2, temperature=0),
         ValueError, r"temperature must be a number in \[0.001, 1000\]"),
    ]


def test_the_api_refuses_what_the_command_refuses(shipped, monkeypatch):
    monkeypatch.setattr(device, "free_memory", lambda _: 8e9)  # whatever this machine has
    for probe, call, error, message in _api_cases(shipped):
        with pytest.raises(error, match=message):
            call()
            pytest.fail(f"{probe}: no error")


def test_complete_still_samples_and_numpy_ids_still_work(shipped):
    lm, vocab, _ = shipped["lm"]
    text, = complete(lm, vocab, "def ", 20, temperature=0.8, top_k=20)
    assert len(text) == 20
    seq2seq = Transformer(TransformerConfig.tiny(12))
    src = torch.as_tensor(np.array([[4, 5, 6]]))
    assert seq2seq(src, src, None, None).shape == (1, 3, 12)
