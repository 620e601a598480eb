"""The course's Llama-style model in the folder Hugging Face's libraries read, both ways.

    export("lm-llama.pt", "lm-llama-hf")          # or: tfcourse export lm-llama.pt lm-llama-hf
    AutoModelForCausalLM.from_pretrained("lm-llama-hf", local_files_only=True)
    AutoTokenizer.from_pretrained("lm-llama-hf", local_files_only=True)
    model = load_transformers("a-folder")          # a LlamaLM from transformers' save_pretrained

The folder is what transformers' save_pretrained writes: config.json (LlamaConfig),
model.safetensors (LlamaForCausalLM's names: tfcourse.parity holds the mapping),
generation_config.json, and the tokenizer: tokenizer.json (Hugging Face tokenizers' format)
with tokenizer_config.json. Three things carry over as the course computes them:

- Rotary positions: transformers rotates the two halves of each head, (x_i, x_{i + d/2}).
  A model that rotates adjacent pairs (x_{2i}, x_{2i+1}) computes the same scores with the
  rows of W^Q and W^K permuted (positional.halves_from_adjacent), which the export does.
- The byte-level BPE tokenizer (chapter 11): its vocabulary is every token's bytes written in
  GPT-2's printable stand-ins, its id = n_specials + rank, its merges in the order learned
  (so by rank, as encode merges), its pre-tokenizer the course's pattern (GPT-2's) followed
  by the bytes-to-stand-ins step, the special tokens at their ids. A special token's
  spelling typed in a text ("<eos>") is read as text (split_special_tokens), as BPE.encode
  reads it without allowed_special; tokenizer(text, split_special_tokens=False) reads it as
  its id, as encode(text, allowed_special="all") does. A character vocabulary becomes a BPE
  model without merges (each character its id, an unknown one <unk>) and declares no
  special tokens: the course reads "<eos>" in a text as five characters.
- Generation: the course never picks a special token (PAD, BOS, EOS, UNK) for running text;
  generation_config.json suppresses them, so greedy generate() picks what
  decoding.lm_generate picks, as long as the text fits in max_len positions (beyond it the
  course reads a sliding window of the last max_len tokens; transformers reads them all).

Importing refuses, in one line naming it, what LlamaLM does not have (another architecture,
biases, RoPE scaling: parity.llama_config_from_transformers).
"""

import json
import os

import torch

from tfcourse.checkpoint import load_checkpoint
from tfcourse.modern import LlamaLM
from tfcourse.parity import (
    llama_config_from_transformers,
    llama_config_to_transformers,
    llama_from_transformers,
    llama_state_dict_to_transformers,
)
from tfcourse.positional import halves_from_adjacent
from tfcourse.tokens import BPE, BYTE_ORDER
from tfcourse.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

# GPT-2's printable stand-in of each byte: the printable ones are themselves, the others
# (BYTE_ORDER's last 68) chr(256), chr(257), ...
STAND_IN = {b: chr(b) if i < 188 else chr(256 + i - 188) for i, b in enumerate(BYTE_ORDER)}


def _printable(data: bytes) -> str:
    return "".join(STAND_IN[b] for b in data)


def transformers_weights(model: LlamaLM) -> dict[str, torch.Tensor]:
    """The model's weights under LlamaForCausalLM's names, W^Q and W^K permuted in the layers
    that rotate adjacent pairs, so that transformers' halves compute the same scores."""
    state = dict(model.state_dict())
    for i, layer in enumerate(model.layers):
        attn = layer.self_attn
        if attn.rotary is not None and attn.rotary.pairs == "adjacent":
            for name, heads in (("w_q", attn.n_heads), ("w_k", attn.n_kv_heads)):
                key = f"layers.{i}.self_attn.{name}.weight"
                state[key] = halves_from_adjacent(state[key], heads)
    return llama_state_dict_to_transformers(state)


def to_transformers(model: LlamaLM):
    """A transformers.LlamaForCausalLM computing what ``model`` computes (eval mode), with the
    generation settings of the course's sampling (special tokens never picked)."""
    import transformers

    if not isinstance(model, LlamaLM):
        raise TypeError(f"model must be a tfcourse LlamaLM, got {type(model).__name__}")
    config = transformers.LlamaConfig(**llama_config_to_transformers(model.config),
                                      bos_token_id=BOS, eos_token_id=EOS)
    theirs = transformers.LlamaForCausalLM(config)
    theirs.load_state_dict(transformers_weights(model))  # every name, both ways
    theirs.generation_config = transformers.GenerationConfig(
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=model.config.pad_id,
        suppress_tokens=sorted({model.config.pad_id, *range(len(SPECIALS))}))
    return theirs.to(next(model.parameters()).dtype).eval()


def tokenizer_json(vocab: BPE | Vocab) -> str:
    """Hugging Face tokenizers' tokenizer.json for a course tokenizer: the same ids for every
    text (module docstring)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    if isinstance(vocab, Vocab):  # one id per character, no merges, an unknown one <unk>
        tokenizer = Tokenizer(models.BPE({s: i for i, s in enumerate(vocab.itos)}, [],
                                         unk_token=SPECIALS[UNK]))
        tokenizer.decoder = decoders.Fuse()
        return tokenizer.to_str()
    if not isinstance(vocab, BPE):
        raise TypeError(f"vocab must be a tfcourse BPE or Vocab, got {type(vocab).__name__}")
    tokens = [*vocab.specials, *map(_printable, vocab.token_bytes)]  # by id
    if len(set(tokens)) != len(tokens):
        raise ValueError("the tokenizer has two ids of the same text (a special token's name "
                         "learned as a merge): tokenizers cannot hold it")
    merges = [(tokens[vocab.offset + a], tokens[vocab.offset + b]) for a, b in vocab.merges]
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges,
                                     ignore_merges=False))  # merge by rank, as encode does
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(vocab.pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=False)
                                  for s in vocab.specials])
    return tokenizer.to_str()


def export(checkpoint: str, directory: str) -> list[str]:
    """Write the folder transformers reads (module docstring) for a Llama-style checkpoint
    (kind "llama", rotary positions) into ``directory`` (made if missing, else empty);
    returns the files written. ValueError in one line for a checkpoint of another kind."""
    model, vocab, state = load_checkpoint(checkpoint)
    if not isinstance(model, LlamaLM):
        raise ValueError(f"{checkpoint} holds a {model.kind} model; export writes Llama-style "
                         f"ones (kind 'llama', e.g. `tfcourse train --task lm-llama`)")
    return export_model(model, vocab, directory)


def export_model(model: LlamaLM, vocab: BPE | Vocab, directory: str) -> list[str]:
    """export() for a model and its tokenizer in memory. A folder that holds files already is
    refused (ValueError): an export never replaces anything."""
    from transformers import PreTrainedTokenizerFast

    if os.path.isdir(directory) and os.listdir(directory):
        raise ValueError(f"{directory} is not empty: export writes a new folder (or an empty "
                         "one), never over other files")
    theirs = to_transformers(model)
    os.makedirs(directory, exist_ok=True)
    theirs.save_pretrained(directory)
    names = {} if isinstance(vocab, Vocab) else dict(  # see the module docstring
        pad_token=SPECIALS[PAD], bos_token=SPECIALS[BOS], eos_token=SPECIALS[EOS],
        unk_token=SPECIALS[UNK], additional_special_tokens=vocab.specials[len(SPECIALS):])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_tokenizer(vocab),
                                        model_max_length=model.config.max_len,
                                        clean_up_tokenization_spaces=False,
                                        split_special_tokens=bool(names), **names)
    tokenizer.save_pretrained(directory)
    return sorted(os.listdir(directory))


def _tokenizer(vocab):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer_json(vocab))


def load_transformers(directory: str, **overrides) -> LlamaLM:
    """A LlamaLM with the config and weights of the folder transformers' save_pretrained wrote
    for a LlamaForCausalLM (read offline). ValueError in one line for another architecture or
    a setting LlamaLM does not have. ``overrides``: LlamaConfig's own settings (attn_impl)."""
    import transformers

    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no config.json in {directory}: not a folder transformers saved")
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    kind, architectures = raw.get("model_type"), raw.get("architectures") or ["LlamaForCausalLM"]
    if kind != "llama" or architectures != ["LlamaForCausalLM"]:
        raise ValueError(f"{directory} holds a {kind} model ({', '.join(architectures)}); "
                         "LlamaLM reads LlamaForCausalLM (model_type 'llama') only")
    config = transformers.LlamaConfig.from_pretrained(directory, local_files_only=True)
    try:
        llama_config_from_transformers(config, **overrides)  # refused before any weight loads
    except ValueError as error:
        raise ValueError(f"{directory}: {error}") from None
    theirs = transformers.LlamaForCausalLM.from_pretrained(directory, local_files_only=True)
    return llama_from_transformers(theirs, **overrides)
