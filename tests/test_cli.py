import os
import subprocess
import sys

import pytest
import torch

import tfcourse.cli as cli
import tfcourse.training as training
from tfcourse.cli import build_parser, main

QUICK = ["--steps", "30", "--batch-size", "16", "--eval-every", "0", "--no-progress",
         "--examples", "2"]


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.strip() and "\n" not in err.strip(), err  # one line, no traceback
    return err


@pytest.mark.parametrize("command", ["train", "decode"])
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
    (["train", "--task", "copy", "--steps", "-3"], "must be positive"),
    (["train", "--task", "copy", "--lr", "x"], "invalid float value: 'x'"),
    (["train"], "--task"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_give_one_line(argv, message, capsys):
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
    assert main(["train", "--task", "copy", "--out", str(out), "--resume", "--steps", "40"]) == 1
    assert "finished run of 30 steps" in one_line_error(capsys)


def test_interrupted_run_resumes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "copy.pt"
    calls, real_make_batch = [], training.make_batch

    def interrupt(pairs, vocab):
        calls.append(1)
        if len(calls) == 25:  # Ctrl-C during step 25
            raise KeyboardInterrupt
        return real_make_batch(pairs, vocab)

    monkeypatch.setattr(training, "make_batch", interrupt)
    assert main(["train", "--task", "copy", "--out", str(out), *QUICK]) == 130
    assert "--resume" in capsys.readouterr().err
    assert torch.load(out, weights_only=True)["step"] == 24
    monkeypatch.setattr(training, "make_batch", real_make_batch)

    # it goes on with its own settings; only --steps may change
    assert main(["train", "--task", "copy", "--out", str(out), "--resume", "--lr", "2"]) == 1
    assert "drop --lr" in one_line_error(capsys)
    assert main(["train", "--task", "reverse", "--out", str(out), "--resume"]) == 1
    assert "trained on --task copy" in one_line_error(capsys)
    assert main(["train", "--task", "copy", "--out", str(out), "--resume", "--steps", "32",
                 "--no-progress", "--examples", "0"]) == 0
    assert "step 32: test exact match" in capsys.readouterr().out
    state = torch.load(out, weights_only=True)
    assert state["step"] == 32 and state["history"]["step"] == list(range(1, 33))
    assert state["train_config"]["batch_size"] == 16


def test_interrupt_before_the_first_step(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "train", interrupted)
    assert main(["train", "--task", "copy", "--out", str(tmp_path / "c.pt"), *QUICK]) == 130
    assert "--resume" not in capsys.readouterr().err  # nothing saved, nothing to resume


def test_console_script_and_module():
    result = subprocess.run([sys.executable, "-m", "tfcourse.cli", "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "train" in result.stdout and "decode" in result.stdout
    script = os.path.join(os.path.dirname(sys.executable), "tfcourse")
    assert os.path.exists(script), "run: pip install --no-deps --no-build-isolation -e ."
