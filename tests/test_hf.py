"""The course's Llama-style model in Hugging Face's folder format, offline: exported
checkpoints (BPE and characters) read by AutoModelForCausalLM with the same logits, by
AutoTokenizer with the same ids on chapter 11's held-out texts, generating the same tokens
greedily; folders saved by transformers read into LlamaLM with the same logits, and what
LlamaLM does not have refused in one line."""

import dataclasses
import json

import pytest
import torch
from test_tokens import HELD_OUT

from tfcourse import cli
from tfcourse.checkpoint import load_checkpoint
from tfcourse.corpora import lm_task, stdlib_corpus
from tfcourse.decoding import lm_generate
from tfcourse.hf import export, export_model, load_transformers, transformers_weights
from tfcourse.inference import complete
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.tokens import BPE, pre_tokenize, train_bpe
from tfcourse.training import TrainConfig, train
from tfcourse.vocab import EOS, PAD, SPECIALS, UNK, Vocab

transformers = pytest.importorskip("transformers")
AutoModel, AutoTokenizer = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
PROMPTS = ["def ", "import os\n", "class Reader:\n    def __init__(self", "    return [x"]
NEW = 200  # new tokens: prompt + 200 fit in the models' 256 positions


@pytest.fixture(scope="module", params=["bpe", "characters"])
def exported(request, tmp_path_factory):
    """(checkpoint, folder, model, vocab): a small Llama-style model trained 60 steps on the
    lm task in BPE tokens (512, with <|endoftext|>) or characters, and its export."""
    tmp = tmp_path_factory.mktemp(request.param)
    corpus = stdlib_corpus()
    if request.param == "bpe":  # a special token beyond the four, as GPT-2's
        bpe = train_bpe(corpus.train, 512, special_tokens=["<|endoftext|>"])
        corpus = dataclasses.replace(corpus, vocab=bpe)
    task = lm_task(block_size=32, corpus=corpus)
    torch.manual_seed(0)
    model = LlamaLM(LlamaConfig.tiny(len(task.vocab), max_len=256, tie_output=False))
    path = str(tmp / "llama.pt")
    train(model, task, TrainConfig(steps=60, batch_size=16, schedule="cosine", lr=0.01,
                                   warmup=10, label_smoothing=0.0, eval_every=0, eval_size=10),
          checkpoint=path, progress=False)
    folder = str(tmp / "hf")
    assert export(path, folder) == ["config.json", "generation_config.json",
                                    "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    model, vocab, _ = load_checkpoint(path)
    return path, folder, model, vocab


def test_the_exported_model_gives_the_same_logits(exported):
    _, folder, ours, vocab = exported
    theirs = AutoModel.from_pretrained(folder, local_files_only=True)
    assert isinstance(theirs, transformers.LlamaForCausalLM)
    tokens = torch.randint(0, len(vocab), (3, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        difference = (theirs(tokens).logits - ours(tokens)).abs().max().item()
    assert difference < 1e-5, difference


def test_the_exported_tokenizer_gives_the_course_ids_on_held_out_text(exported):
    _, folder, _, vocab = exported
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    typed = HELD_OUT["special tokens"]  # "end<|endoftext|>start <eos> and <pad><|endoftext|>"
    for name, text in HELD_OUT.items():
        if text != typed or isinstance(vocab, Vocab):
            assert tokenizer(text)["input_ids"] == vocab.encode(text), name
    source = HELD_OUT["python source (test files)"][:3000]
    ids = [i for i in vocab.encode(source) if i != UNK]  # the course shows UNK as '?'
    assert tokenizer.decode(ids) == vocab.decode(ids)
    if isinstance(vocab, BPE):  # every special token at its id, the extra one too
        assert tokenizer.convert_tokens_to_ids([*SPECIALS, "<|endoftext|>"]) == [0, 1, 2, 3, 4]
        assert tokenizer.eos_token_id == vocab.eos_id and tokenizer.pad_token_id == vocab.pad_id
        # a special token's spelling is text, as encode() without allowed_special reads it
        # (each pre-token alone: "<", "eos", ">"); split_special_tokens=False reads each as
        # its id (encode's allowed_special="all")
        text = vocab.encode
        assert tokenizer(typed)["input_ids"] == [
            i for piece in pre_tokenize(typed, vocab.pattern) for i in text(piece)]
        assert tokenizer(typed, split_special_tokens=False)["input_ids"] == [
            *text("end"), 4, *text("start "), EOS, *text(" and "), PAD, 4]
    else:  # no special token declared: "<eos>" typed in a text is five characters
        assert tokenizer("<eos>")["input_ids"] == vocab.encode("<eos>") != [EOS]


def test_greedy_generate_makes_the_course_greedy_tokens(exported, tmp_path):
    """On the trained model (which soon repeats itself), and on a random one whose large
    embeddings make its greedy text wander through many tokens (a harder test)."""
    _, folder, trained, vocab = exported
    torch.manual_seed(3)
    wild = LlamaLM(trained.config).eval()
    with torch.no_grad():
        wild.embed.embedding.weight.mul_(4.0)
    export_model(wild, vocab, str(tmp_path))
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    for ours, where, least in ((trained, folder, 4), (wild, str(tmp_path), min(100, len(vocab) // 2))):
        theirs = AutoModel.from_pretrained(where, local_files_only=True)
        made = set()
        for prompt in PROMPTS:
            ids = torch.tensor([vocab.encode(prompt)])
            want = lm_generate(ours, ids, NEW, never=range(len(SPECIALS)))  # complete()'s
            got = theirs.generate(tokenizer(prompt, return_tensors="pt")["input_ids"],
                                  max_new_tokens=NEW, do_sample=False)
            assert got.shape == (1, ids.size(1) + NEW) and torch.equal(got, want), prompt
            made |= set(want[0, -NEW:].tolist())
        assert len(made) >= least  # not one token repeated
    generate = transformers.pipeline("text-generation", model=folder, tokenizer=folder)
    text = generate(PROMPTS[0], max_new_tokens=50, do_sample=False)[0]["generated_text"]
    assert text == PROMPTS[0] + complete(trained, vocab, PROMPTS[0], 50)[0]


def test_adjacent_pairs_are_permuted_into_halves():
    torch.manual_seed(1)
    ours = LlamaLM(LlamaConfig.tiny(40, n_heads=4, n_kv_heads=2)).eval()
    for layer in ours.layers:
        layer.self_attn.rotary.pairs = "adjacent"  # Meta's convention
    from tfcourse.hf import to_transformers

    theirs = to_transformers(ours)
    tokens = torch.randint(0, 40, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(theirs(tokens).logits, ours(tokens), rtol=0, atol=1e-5)
        unpermuted = transformers.LlamaForCausalLM(theirs.config).eval()
        unpermuted.load_state_dict({name: tensor for name, tensor in
                                    transformers_weights(_halves(ours)).items()})
        assert (unpermuted(tokens).logits - ours(tokens)).abs().max() > 1e-2


def _halves(model):
    """The same weights, read as rotating halves (no permutation at export)."""
    copy = LlamaLM(model.config)
    copy.load_state_dict(model.state_dict())
    return copy


def test_tfcourse_export_writes_the_folder_and_refuses_other_kinds(tmp_path, capsys):
    out = str(tmp_path / "l.pt")
    assert cli.main(["train", "--task", "lm-llama", "--steps", "2", "--eval-every", "2",
                     "--d-model", "32", "--n-layers", "1", "--d-ff", "64", "--out", out,
                     "--no-progress", "--threads", "1", "--examples", "1"]) == 0
    capsys.readouterr()
    assert cli.main(["export", out, str(tmp_path / "hf")]) == 0
    assert capsys.readouterr().out.strip().endswith(
        "config.json, generation_config.json, model.safetensors, tokenizer.json, "
        "tokenizer_config.json")
    assert cli.main(["export", out, str(tmp_path / "hf")]) == 1  # never over other files
    assert capsys.readouterr().err.strip() == (f"tfcourse export: error: {tmp_path / 'hf'} is "
                                               "not empty: export writes a new folder (or an "
                                               "empty one), never over other files")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_key_value_heads"],
            config["tie_word_embeddings"]) == ("llama", 32, 2, True)
    lm = str(tmp_path / "lm.pt")
    assert cli.main(["train", "--task", "lm", "--steps", "1", "--eval-every", "1",
                     "--d-model", "32", "--n-layers", "1", "--d-ff", "64", "--out", lm,
                     "--no-progress", "--threads", "1", "--examples", "1"]) == 0
    capsys.readouterr()
    assert cli.main(["export", lm, str(tmp_path / "no")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"tfcourse export: error: {lm} holds a lm model; export writes Llama-style "
                   "ones (kind 'llama', e.g. `tfcourse train --task lm-llama`)")
    learned = LlamaLM(LlamaConfig.tiny(40, positions="learned"))
    with pytest.raises(ValueError, match="^positions='learned': LlamaForCausalLM has rotary "
                       "positions only$"):
        export_model(learned, Vocab("abc"), str(tmp_path / "learned"))


# ------------------------------------------------------------------ import


def _saved(tmp_path, seed=0, **settings):
    """A LlamaForCausalLM of `settings` (small, norm gains not 1) saved by save_pretrained."""
    torch.manual_seed(seed)
    base = dict(vocab_size=60, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
    config = transformers.LlamaConfig(**{**base, **settings})
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize("settings", [
    dict(),  # grouped-query: 8 query heads, 2 key/value heads
    dict(tie_word_embeddings=True, num_key_value_heads=1),
    dict(num_key_value_heads=8, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
    dict(head_dim=8, rms_norm_eps=1e-6),  # head_dim as given (= hidden_size / heads)
    dict(head_dim=16),  # heads wider than hidden_size / heads (8): q 128, k and v 32 wide
    dict(head_dim=4, num_key_value_heads=8),  # narrower: q, k and v 32 wide, o 32 -> 64
])
def test_a_folder_saved_by_transformers_loads_with_the_same_logits(tmp_path, settings):
    theirs = _saved(tmp_path, **settings)
    ours = load_transformers(str(tmp_path))
    c = ours.config
    assert (c.n_kv_heads, c.head_dim, c.tie_output, c.norm_eps) == (
        theirs.config.num_key_value_heads, theirs.config.head_dim,
        theirs.config.tie_word_embeddings, theirs.config.rms_norm_eps)
    assert c.rope_base == theirs.config.rope_parameters["rope_theta"]
    tokens = torch.randint(0, 60, (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), theirs(tokens).logits, rtol=0, atol=1e-5)


def test_export_then_import_gives_the_same_model(tmp_path):
    torch.manual_seed(2)
    ours = LlamaLM(LlamaConfig.tiny(300, rope_base=20000.0, tie_output=False)).eval()
    export_model(ours, Vocab([chr(i) for i in range(33, 329)]), str(tmp_path))
    back = load_transformers(str(tmp_path))
    assert back.config == ours.config
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_a_head_width_other_than_d_model_over_heads_goes_out_as_it_came_in(tmp_path):
    theirs = _saved(tmp_path / "theirs", head_dim=16)  # 8 heads of 16 in a model 64 wide
    ours = load_transformers(str(tmp_path / "theirs"))
    assert ours.layers[0].self_attn.w_q.weight.shape == (8 * 16, 64)
    assert ours.layers[0].self_attn.w_o.weight.shape == (64, 8 * 16)
    export_model(ours, Vocab([chr(i) for i in range(33, 89)]), str(tmp_path / "back"))
    with open(tmp_path / "back" / "config.json") as f:
        assert json.load(f)["head_dim"] == 16
    again = AutoModel.from_pretrained(tmp_path / "back", local_files_only=True).eval()
    tokens = torch.randint(0, 60, (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(again(tokens).logits, theirs(tokens).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("settings, said", [
    (dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 64}),
     "rope_type='llama3' (LlamaLM: 'default')"),
    (dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
     "rope_type='linear' (LlamaLM: 'default')"),
    (dict(attention_bias=True), "attention_bias=True (LlamaLM: False)"),
    (dict(mlp_bias=True), "mlp_bias=True (LlamaLM: False)"),
    (dict(hidden_act="gelu"), "hidden_act='gelu' (LlamaLM: 'silu')"),
])
def test_what_llama_lm_lacks_is_refused_in_one_line(tmp_path, settings, said):
    _saved(tmp_path, **settings)
    with pytest.raises(ValueError) as error:
        load_transformers(str(tmp_path))
    assert str(error.value) == f"{tmp_path}: LlamaLM has no equivalent of {said}"


@pytest.mark.parametrize("model_class, said", [
    ("MistralForCausalLM", "a mistral model (MistralForCausalLM)"),
    ("LlamaForSequenceClassification", "a llama model (LlamaForSequenceClassification)"),
    ("GPT2LMHeadModel", "a gpt2 model (GPT2LMHeadModel)"),
])
def test_another_architecture_is_refused_in_one_line(tmp_path, model_class, said):
    cls = getattr(transformers, model_class)
    small = dict(vocab_size=60, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                 num_attention_heads=4, num_key_value_heads=2, n_embd=32, n_layer=1, n_head=4)
    config = cls.config_class(**{k: v for k, v in small.items()
                                 if k in cls.config_class().to_dict()})
    cls(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as error:
        load_transformers(str(tmp_path))
    assert str(error.value) == (f"{tmp_path} holds {said}; LlamaLM reads LlamaForCausalLM "
                                "(model_type 'llama') only")
