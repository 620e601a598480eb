import io
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import tfcourse.cli as cli
import tfcourse.device as device
from tfcourse.checkpoint import seal
from tfcourse.cli import DATES_CHECKPOINT, build_parser, main
from tfcourse.data import Task
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.recipes import RECIPES
from tfcourse.training import TrainConfig
from tfcourse.vocab import Vocab

QUICK = ["--steps", "30", "--batch-size", "16", "--eval-every", "0", "--no-progress",
         "--examples", "2", "--threads", "1"]
FEW = ["--steps", "5", "--batch-size", "8", "--eval-every", "0", "--eval-size", "20",
       "--no-progress", "--examples", "0", "--threads", "1"]
TINY = ["--d-model", "16", "--n-heads", "2", "--d-ff", "32", "--n-layers", "1"]


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.strip() and "\n" not in err.strip(), err  # one line, no traceback
    return err


def interrupt_at(monkeypatch, call, method="make_batch"):
    """Ctrl-C at the call-th call of Task.<method> of a new run (make_batch: once to check
    that its longest examples fit the model's positions, once to measure the memory a step
    needs, then once per step and once per validation round; evaluate: once per validation
    round)."""
    calls, real = [], getattr(Task, method)
    call += 2 * (method == "make_batch")

    def interrupted(self, *args):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(Task, method, interrupted)


@pytest.mark.parametrize("command", ["train", "decode", "sample", "classify"])
def test_help_explains_every_option(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    parser = build_parser()._subparsers._group_actions[0].choices[command]
    for action in parser._actions:
        assert action.help, action.dest  # every option has an explanation
        for flag in action.option_strings:
            assert flag in text


@pytest.mark.parametrize("argv, message", [
    (["train", "--task", "nope"], "invalid choice: 'nope'"),
    (["train", "--task", "copy", "--steps", "-3"], "--steps: must be an integer >= 1, got -3"),
    (["train", "--task", "copy", "--steps", "2.5"], "--steps: invalid int value: '2.5'"),
    (["train", "--task", "copy", "--lr", "x"], "invalid float value: 'x'"),
    (["train", "--task", "copy", "--lr", "inf"], "--lr: must be a number > 0, got inf"),
    (["train", "--task", "copy", "--lr", "nan"], "--lr: must be a number > 0, got nan"),
    (["train", "--task", "copy", "--dropout", "nan"], "--dropout: must be a number in [0, 1), got nan"),
    (["train", "--task", "copy", "--label-smoothing", "1"],
     "--label-smoothing: must be a number in [0, 1), got 1.0"),
    (["train", "--task", "copy", "--examples", "-1"], "--examples: must be in [0, inf), got -1"),
    (["train", "--task", "copy", "--threads", "0"], "--threads: must be in (0, inf), got 0"),
    (["train"], "--task"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_give_one_line_at_once(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in one_line_error(capsys)


def test_bad_checkpoints_give_one_line(tmp_path, capsys):
    assert main(["decode", "--checkpoint", str(tmp_path / "missing.pt"), "abc"]) == 1
    assert "no checkpoint at" in one_line_error(capsys)
    (tmp_path / "junk.pt").write_bytes(b"\x00garbage")
    assert main(["decode", "--checkpoint", str(tmp_path / "junk.pt"), "abc"]) == 1
    assert "not a readable tfcourse checkpoint" in one_line_error(capsys)
    (tmp_path / "empty.pt").write_bytes(b"")
    assert main(["decode", "--checkpoint", str(tmp_path / "empty.pt"), "abc"]) == 1
    assert "is empty (0 bytes)" in one_line_error(capsys)
    assert main(["train", "--task", "copy", "--out", str(tmp_path / "none.pt"), "--resume"]) == 1
    assert "no checkpoint to resume" in one_line_error(capsys)
    assert main(["train", "--task", "copy", "--device", "tpu", *QUICK]) == 1
    assert "device" in one_line_error(capsys)


def test_train_and_decode(tmp_path, capsys):
    out = tmp_path / "copy.pt"
    assert main(["train", "--task", "copy", "--out", str(out), *QUICK]) == 0
    printed = capsys.readouterr().out
    assert "step 30: test exact match" in printed and str(out) in printed
    assert printed.count(" -> ") == 2  # the examples
    state = torch.load(out, weights_only=True)
    assert state["step"] == 30 and state["train_config"]["steps"] == 30
    assert state["train_config"]["batch_size"] == 16 and state["model_config"]["dropout"] == 0

    assert main(["decode", "--checkpoint", str(out), "abcdefgabc", "gfedcbagfe"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" -> ")[0] for line in lines] == ["abcdefgabc", "gfedcbagfe"]
    assert all(line.endswith(")") and "(confidence " in line for line in lines)
    assert main(["train", "--task", "copy", "--out", str(out), "--resume", "--steps", "40"]) == 1
    assert "finished run of 30 steps" in one_line_error(capsys)


def test_an_existing_checkpoint_is_never_overwritten_unasked(tmp_path, capsys):
    out = tmp_path / "copy.pt"
    out.write_bytes(b"a learner's earlier run")
    assert main(["train", "--task", "copy", "--out", str(out), *QUICK]) == 1
    assert "exists: carry on with --resume, replace it with --overwrite" in one_line_error(capsys)
    assert out.read_bytes() == b"a learner's earlier run"
    assert main(["train", "--task", "copy", "--out", str(out), "--overwrite", *QUICK]) == 0
    assert torch.load(out, weights_only=True)["step"] == 30


def test_interrupted_run_resumes_with_the_same_command(tmp_path, capsys, monkeypatch):
    out = tmp_path / "copy.pt"
    command = ["train", "--task", "copy", "--seed", "0", "--out", str(out), *QUICK]
    interrupt_at(monkeypatch, 25)  # Ctrl-C during step 25
    assert main(command) == 130
    assert ("the last finished step (24) is saved in" in capsys.readouterr().err)
    assert torch.load(out, weights_only=True)["step"] == 24
    monkeypatch.undo()

    # The options that match the checkpoint are accepted; one that differs is named.
    assert main([*command, "--resume", "--lr", "2"]) == 1
    assert "--lr 2.0 differs from the checkpoint's --lr 0.008" in one_line_error(capsys)
    assert main([*command, "--resume", "--d-model", "32"]) == 1
    assert "--d-model 32 differs from the checkpoint's --d-model 64" in one_line_error(capsys)
    assert main(["train", "--task", "reverse", "--out", str(out), "--resume"]) == 1
    assert "trained on --task copy" in one_line_error(capsys)
    assert main([*command, "--resume", "--steps", "32", "--examples", "0"]) == 0
    assert "step 32: test exact match" in capsys.readouterr().out
    state = torch.load(out, weights_only=True)
    assert state["step"] == 32 and state["history"]["step"] == list(range(1, 33))
    assert state["train_config"]["batch_size"] == 16


def test_an_init_run_resumes_with_the_command_it_prints(tmp_path, capsys, monkeypatch):  # NI1, KI1
    start, out = tmp_path / "start.pt", tmp_path / "run.pt"
    assert main(["train", "--task", "copy", "--out", str(start), *FEW, *TINY]) == 0
    command = ["train", "--task", "copy", "--init", str(start), "--out", str(out), *FEW, *TINY,
               "--steps", "10"]
    interrupt_at(monkeypatch, 6)  # during step 6
    assert main(command) == 130
    assert "carry on with the same command and --resume" in capsys.readouterr().err
    monkeypatch.undo()
    assert main([*command, "--resume"]) == 0
    assert torch.load(out, weights_only=True)["init"]["path"] == str(start)
    capsys.readouterr()
    assert main(["train", "--task", "copy", "--init", str(out), "--out", str(start), "--resume",
                 *FEW, *TINY]) == 1  # another start than the checkpoint's
    assert "started from random weights; --resume carries on" in one_line_error(capsys)


def test_ctrl_c_during_the_test_evaluation_says_the_run_is_complete(tmp_path, capsys,
                                                                    monkeypatch):  # N6
    out = tmp_path / "run.pt"
    interrupt_at(monkeypatch, 2, "evaluate")  # the validation round, then the test split
    assert main(["train", "--task", "copy", "--out", str(out), *FEW]) == 130
    err = capsys.readouterr().err
    assert f"the run is complete, {out} holds its step 5" in err
    assert torch.load(out, weights_only=True)["step"] == 5


def test_interrupt_before_a_step_finishes_saves_nothing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "c.pt"
    interrupt_at(monkeypatch, 1)
    assert main(["train", "--task", "copy", "--out", str(out), *QUICK]) == 130
    err = capsys.readouterr().err
    assert "no step finished: nothing saved" in err and "--resume" not in err
    assert not out.exists()
    monkeypatch.undo()

    assert main(["train", "--task", "copy", "--out", str(out), "--steps", "10", *QUICK[2:]]) == 0
    before = out.read_bytes()
    capsys.readouterr()
    interrupt_at(monkeypatch, 1)
    assert main(["train", "--task", "copy", "--out", str(out), "--overwrite", *QUICK]) == 130
    assert "nothing saved" in capsys.readouterr().err and out.read_bytes() == before


def test_a_diverging_run_exits_with_one_line(tmp_path, capsys):
    out = tmp_path / "c.pt"
    assert main(["train", "--task", "copy", "--out", str(out), "--lr", "1e38",
                 "--schedule", "cosine", *QUICK]) == 1
    assert "training diverged" in one_line_error(capsys)


def test_unwritable_out_fails_before_training(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained anyway"))
    assert main(["train", "--task", "copy", "--out", str(tmp_path / "file" / "c.pt"), *QUICK]) == 1
    assert f"{tmp_path / 'file'} is not a directory" in one_line_error(capsys)


def test_a_full_disk_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    def disk_full(obj, f, *args, **kwargs):
        with open(f, "wb") as out:
            out.write(b"PK\x03\x04 half")
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", disk_full)
    out = tmp_path / "c.pt"
    assert main(["train", "--task", "copy", "--out", str(out), *QUICK]) == 1
    assert "cannot write the checkpoint" in one_line_error(capsys)
    assert os.listdir(tmp_path) == []


@pytest.fixture
def shipped(monkeypatch):
    """The shipped dates checkpoint, loaded once."""
    model, vocab, state = cli.load_checkpoint(DATES_CHECKPOINT)
    monkeypatch.setattr(cli, "load_checkpoint", lambda *a, **k: (model, vocab, state))


def test_decode_says_what_it_cannot_know(shipped, capsys):
    long = "1" * 5000
    texts = ["May 3, 1999", "", "May 3, 1999 🎉", long, "March 3, 2026"]
    assert main(["decode", *texts]) == 1  # some inputs were refused
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert [line.split(" -> ")[0] for line in lines] == [texts[0], texts[2], texts[4]]
    assert lines[0] == "May 3, 1999 -> 1999-05-03  (confidence 0.90)"
    assert "not in the model's vocabulary, read as unknown: '🎉'" in lines[1]
    assert "input 2 refused: an empty input" in err
    assert "input 4 refused: 5,000 characters, more than the 512 the model reads" in err


def test_decode_points_out_outputs_that_cannot_be_right(shipped, capsys, monkeypatch):
    monkeypatch.setattr(cli, "predict", lambda model, texts, *a, **k: ["2021-02-31", "2021-02-28"])
    assert main(["decode", "31 febrero 2021", "28 febrero 2021"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("; not a valid date)") and lines[1].endswith(")")
    assert "valid" not in lines[1]
    check = RECIPES["dates"].check_output
    assert check("2026-11-21") is None and check("2026-13-01") == "not a valid date"
    assert check("1908-6-2") == "not a date in ISO form (YYYY-MM-DD)"


def test_decode_refuses_a_checkpoint_of_another_kind(tmp_path, capsys, monkeypatch):
    from model_kinds import KINDS, TinyLM

    from tfcourse import checkpoint
    from tfcourse.training import TrainConfig

    monkeypatch.setitem(checkpoint._KINDS, "lm", TinyLM)
    task = KINDS["lm"][2]()
    checkpoint.save_checkpoint(tmp_path / "lm.pt", TinyLM(KINDS["lm"][1](task)), task,
                               TrainConfig(), step=1)
    assert main(["decode", "--checkpoint", str(tmp_path / "lm.pt"), "abc"]) == 1
    assert "holds a lm model (task 'toy-lm'); decode needs an encoder-decoder" in \
        one_line_error(capsys)


def test_console_script_and_module():
    result = subprocess.run([sys.executable, "-m", "tfcourse", "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "train" in result.stdout and "decode" in result.stdout
    script = os.path.join(os.path.dirname(sys.executable), "tfcourse")
    assert os.path.exists(script), "run: pip install --no-deps --no-build-isolation -e ."


def test_threads_follow_the_idle_cores_unless_told(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(device, "free_cpu_cores", lambda: 1)
        monkeypatch.setattr(device.os, "cpu_count", lambda: 4)
        assert device.set_threads("auto") == "1 thread (3 of 4 cores busy)"
        assert torch.get_num_threads() == 1
        assert device.set_threads(2) == "2 threads" and torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stands
        assert device.set_threads("auto") == "2 threads"
        with pytest.raises(ValueError, match="--threads 1000000: this machine has 4 cores"):
            device.set_threads(1000000)
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------ chapter 09: sample, classify


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    """A language model and a classifier, trained for a few steps by `tfcourse train`."""
    folder = tmp_path_factory.mktemp("ch09")
    for task in ("lm", "classify"):
        argv = ["train", "--task", task, "--out", str(folder / f"{task}.pt"), *QUICK,
                "--d-model", "16", "--n-heads", "2", "--d-ff", "32", "--n-layers", "1"]
        assert main(argv) == 0
    return folder


def test_train_sample_and_classify(tiny_checkpoints, capsys):
    capsys.readouterr()
    lm = str(tiny_checkpoints / "lm.pt")
    assert main(["sample", "--checkpoint", lm, "--prompt", "import ", "--max-new", "30",
                 "--samples", "2", "--top-k", "5", "--top-p", "0.9", "--temperature", "0.8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "--- sample 1 of 2 ---" and lines[1].startswith("import ")
    assert main(["sample", "--checkpoint", lm, "--prompt", "x", "--max-new", "5", "--greedy"]) == 0
    greedy = capsys.readouterr().out
    assert main(["sample", "--checkpoint", lm, "--prompt", "x", "--max-new", "5",
                 "--top-k", "1"]) == 0
    assert capsys.readouterr().out == greedy and greedy.startswith("x")

    classifier = str(tiny_checkpoints / "classify.pt")
    texts = ["Mitteleuropäische Sommerzeit", "dolarów amerykańskich"]
    assert main(["classify", "--checkpoint", classifier, *texts]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" -> ")[0] for line in lines] == texts
    assert all(line.split(" -> ")[1][:2] in ("en", "de", "nl", "sv", "fr", "es", "pt", "it",
                                             "pl", "tr") and "(p = " in line for line in lines)


def test_sample_and_classify_bad_input_one_line(tiny_checkpoints, tmp_path, capsys):
    capsys.readouterr()
    lm, classifier = str(tiny_checkpoints / "lm.pt"), str(tiny_checkpoints / "classify.pt")
    assert main(["sample", "--checkpoint", lm, "--prompt", ""]) == 1
    assert "the prompt is empty" in one_line_error(capsys)
    assert main(["sample", "--checkpoint", lm, "--prompt", "число = 1"]) == 1
    assert "characters the model has never seen: 'илосч'" in one_line_error(capsys)
    # longer than the model's positions: read through a sliding window of them
    assert main(["sample", "--checkpoint", lm, "--prompt", "x" * 300, "--max-new", "10"]) == 0
    assert len(capsys.readouterr().out.removesuffix("\n")) == 310  # the text may end in newlines
    assert main(["sample", "--checkpoint", classifier]) == 1
    assert ("holds a classifier model (task 'classify'); sample needs a language model (lm)"
            in one_line_error(capsys))
    assert main(["classify", "--checkpoint", lm, "abc"]) == 1
    assert "holds a lm model (task 'lm'); classify needs a classifier" in one_line_error(capsys)
    assert main(["decode", "--checkpoint", classifier, "abc"]) == 1
    assert "decode needs an encoder-decoder (seq2seq)" in one_line_error(capsys)
    assert main(["classify", "--checkpoint", str(tmp_path / "missing.pt"), "abc"]) == 1
    assert "no checkpoint at" in one_line_error(capsys)

    texts = ["Sommerzeit", "", "Sommerzeit 🎉", "日本語", "x" * 500]
    assert main(["classify", "--checkpoint", classifier, *texts]) == 1  # some were refused
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert [line.split(" -> ")[0] for line in lines] == [texts[0], texts[2]]
    assert "not in the model's vocabulary, read as unknown: '🎉'" in lines[1]
    assert "input 2 refused: an empty input" in err
    assert "input 4 refused: none of its characters is in the model's vocabulary" in err
    assert "input 5 refused: 500 characters, more than the 127 the model reads" in err
    assert len(err.strip().splitlines()) == 3


def test_classify_refuses_a_model_without_classes(tmp_path, capsys):
    out = tmp_path / "mlm.pt"
    assert main(["train", "--task", "mlm", "--out", str(out), *QUICK, "--d-model", "16",
                 "--n-heads", "2", "--d-ff", "32", "--n-layers", "1"]) == 0
    assert "masked accuracy" in capsys.readouterr().out
    assert main(["classify", "--checkpoint", str(out), "abc"]) == 1
    assert "trained on task 'mlm', which has no classes" in one_line_error(capsys)


def test_a_new_task_never_overwrites_another_tasks_run(tiny_checkpoints, capsys):
    lm = tiny_checkpoints / "lm.pt"
    before = lm.read_bytes()
    assert main(["train", "--task", "classify", "--out", str(lm), "--resume", *QUICK]) == 1
    assert "was trained on --task lm, not classify" in one_line_error(capsys)
    assert main(["train", "--task", "classify", "--out", str(lm), *QUICK]) == 1
    assert "exists" in one_line_error(capsys)
    assert lm.read_bytes() == before


def test_train_can_start_from_a_checkpoints_weights(tiny_checkpoints, tmp_path, capsys):
    """--init: a classifier starts from a (tiny) pre-trained encoder, and records where from;
    a checkpoint of another kind, other settings or another vocabulary is refused in one line."""
    tiny = ["--d-model", "16", "--n-heads", "2", "--d-ff", "32", "--n-layers", "1"]
    mlm, out = tmp_path / "mlm.pt", tmp_path / "classify.pt"
    assert main(["train", "--task", "mlm", "--out", str(mlm), *QUICK, *tiny]) == 0
    before = torch.load(mlm, weights_only=True)
    one_step = [*QUICK[2:], "--steps", "1", "--lr", "1e-9"]  # the weights barely move
    assert main(["train", "--task", "classify", "--init", str(mlm), "--out", str(out),
                 *one_step, *tiny]) == 0
    state = torch.load(out, weights_only=True)
    assert state["init"]["path"] == str(mlm) and state["init"]["task"] == "mlm"
    assert state["init"]["step"] == 30 and len(state["init"]["sha256"]) == 64
    for name, weight in before["model"].items():
        torch.testing.assert_close(state["model"][name], weight, atol=1e-6, rtol=0)
    capsys.readouterr()
    lm = str(tiny_checkpoints / "lm.pt")
    refused = [(["--init", lm, *tiny], "holds a lm model; --task classify trains a classifier"),
               (["--init", str(mlm), *tiny, "--d-ff", "64"], "--d-ff 32 (this run: 64)"),
               (["--init", str(mlm), *tiny, "--seed", "1"], "has another vocabulary than"),
               (["--init", "", *tiny], "--init is empty")]
    for options, message in refused:
        argv = ["train", "--task", "classify", "--out", str(tmp_path / "new.pt"), *one_step]
        assert main([*argv, *options]) == 1
        assert message in one_line_error(capsys)
    assert not (tmp_path / "new.pt").exists()


# ------------------------------------------------- issue 17: what a new user tried, one line each


def test_every_recipe_setting_is_an_option_and_every_option_parses():
    """`train --help` shows the recipes' settings as options: each must be accepted."""
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = {flag for action in train._actions for flag in action.option_strings}
    for name, r in RECIPES.items():
        for key in {**r.train, **r.model}:
            assert cli._option(key) in flags, (name, key)
        args = build_parser().parse_args(["train", "--task", name,
                                          *" ".join(cli._as_options({**r.train, **r.model})).split()])
        for key, value in {**r.train, **r.model}.items():
            assert getattr(args, key) == value, (name, key)


@pytest.mark.parametrize("argv, message", [
    (["train", "--task", "copy", "--seed", str(10**29)], "--seed: must be an integer in [0, 4294967296)"),
    (["train", "--task", "copy", "--dropout", "1.0"], "--dropout: must be a number in [0, 1), got 1.0"),
    (["train", "--task", "copy", "--n-layers", "0"], "--n-layers: must be an integer >= 1, got 0"),
    (["train", "--task", "lm", "--attn-impl", "flash"], "invalid choice: 'flash'"),
])
def test_nonsense_settings_are_refused_at_once(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in one_line_error(capsys)


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "1000000000"], "a micro-batch of 1000000000 examples (batch_size) needs about"),
    (["--d-model", "1000000"], "--d-model 1000000 (a model of 24,001,083,000,523 parameters"),
    (["--threads", "1000000"], "--threads 1000000: this machine has"),
    (["--pooling", "mean"], "--pooling is not a setting of the copy model (TransformerConfig)"),
    (["--n-heads", "5"], "d_model=64 is not divisible by n_heads=5"),
])
def test_too_large_or_unknown_settings_give_one_line(argv, message, tmp_path, capsys):
    assert main(["train", "--task", "copy", "--out", str(tmp_path / "c.pt"), *QUICK, *argv]) == 1
    assert message in one_line_error(capsys)
    assert not (tmp_path / "c.pt").exists()


def test_decode_and_sample_refuse_sizes_that_cannot_fit(tiny_checkpoints, capsys):
    assert main(["decode", "--beam", "1000000000", "abc"]) == 1
    assert "--beam 1000000000 is more than the" in one_line_error(capsys)
    lm = str(tiny_checkpoints / "lm.pt")
    assert main(["sample", "--checkpoint", lm, "--samples", "100000000000", "--max-new", "5"]) == 1
    assert "--samples 100000000000 needs about" in one_line_error(capsys)


def test_resume_with_nothing_left_to_do_says_so(tmp_path, capsys):
    out = tmp_path / "copy.pt"
    command = ["train", "--task", "copy", "--out", str(out), *QUICK, "--eval-every", "10"]
    assert main([*command, "--steps", "20"]) == 0
    capsys.readouterr()
    assert main([*command, "--resume", "--steps", "10"]) == 1
    assert "has done 20 steps already: with steps=10 nothing is left to train" in \
        one_line_error(capsys)


def test_a_run_that_diverges_before_saving_says_nothing_was_saved(tmp_path, capsys):
    assert main(["train", "--task", "copy", "--out", str(tmp_path / "c.pt"), *QUICK,
                 "--lr", "1e30", "--schedule", "cosine", "--clip", "0"]) == 1
    message = one_line_error(capsys)
    assert "training diverged" in message and "nothing was saved" in message
    assert "keeps the last good round" not in message


def test_a_directory_as_out_fails_before_training(tmp_path, capsys):
    assert main(["train", "--task", "copy", "--out", str(tmp_path), "--overwrite", *QUICK]) == 1
    assert f"--out {tmp_path} is a directory: give a file name" in one_line_error(capsys)


def test_a_killed_save_leaves_no_lasting_temporary_file(tmp_path):
    from tfcourse.checkpoint import save_checkpoint

    out = tmp_path / "copy.pt"
    stale = tmp_path / "copy.pt.tmp999999999"  # a process killed while saving (no such pid)
    stale.write_bytes(b"half a checkpoint")
    task = Task("copy", Vocab("ab"), [], [], [])
    model = Transformer(TransformerConfig.tiny(6, n_layers=1))
    save_checkpoint(str(out), model, task, TrainConfig(), step=0)
    assert out.exists() and not stale.exists()


def test_a_checkpoint_with_too_few_class_names_is_refused(tiny_checkpoints, tmp_path, capsys):
    state = torch.load(tiny_checkpoints / "classify.pt", weights_only=True)
    state["classes"] = state["classes"][:1]
    torch.save(seal(state), tmp_path / "edited.pt")  # written so: the file's digest is its own
    assert main(["classify", "--checkpoint", str(tmp_path / "edited.pt"), "Montag"]) == 1
    assert "names 1 classes for a model of 10 outputs" in one_line_error(capsys)


def test_reading_standard_input_from_a_terminal_is_announced(monkeypatch, capsys):
    class Terminal(io.BytesIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(Terminal(b"")))
    assert main(["decode"]) == 1
    err = capsys.readouterr().err
    assert "reading inputs from standard input, one a line; end with Ctrl-D" in err
    assert "no input: give TEXT arguments or lines on standard input" in err


def test_ctrl_c_while_torch_loads_is_one_line():
    """Ctrl-C in the first second of the `tfcourse` command: one line, exit 130."""
    script = os.path.join(os.path.dirname(sys.executable), "tfcourse")
    process = subprocess.Popen([script, "train", "--task", "copy", "--help"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # importing torch takes longer
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    if process.returncode == 0:
        pytest.skip("the command finished before the signal (a very fast machine)")
    assert process.returncode == 130 and err.strip() == "interrupted", err
