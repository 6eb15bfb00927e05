#!/usr/bin/python3
# tiny-gguf.py -- write a tiny random-weight llama-architecture GGUF model.
#
# Purpose: give tests a *real* llama-server (OpenAI-compatible API) without
# downloading any model. The weights are random, so free-form output is
# gibberish, but with a grammar (response_format json_schema) the output is
# always syntactically valid for the schema -- which is what our tests need.
#
# Design:
#   * Pure stdlib (struct, random, argparse); run with /usr/bin/python3.
#   * Deterministic: same --seed and options => byte-identical file.
#   * Written from the GGUF format description (version 3, little endian):
#       header   : magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
#       kv pairs : gguf-string key, u32 value type, value
#                  (string = u64 length + UTF-8 bytes; array = u32 elem type,
#                   u64 count, elems)
#       tensors  : gguf-string name, u32 n_dims, u64 dims[] (fastest-varying
#                  first, i.e. ggml ne0 = row length), u32 ggml type
#                  (0 = F32), u64 offset relative to the data section
#       data     : starts at the next multiple of general.alignment (32);
#                  each tensor's offset is aligned to 32 as well.
#   * Architecture "llama": token_embd, N blocks of (attn_norm, attn_q/k/v,
#     attn_output, ffn_norm, ffn_gate/up/down), output_norm, output.
#     Defaults: 2 layers, 64 dims, 4 heads (head dim 16 = rope dims), ffn 128.
#   * Tokenizer "llama" (SentencePiece-style, scores decide merges, "\u2581"
#     stands for a space) with byte fallback: <unk>=0, <s>=1 (bos), </s>=2
#     (eos), chatml control tokens <|im_start|>/<|im_end|> (im_end is also
#     the end-of-turn token), the 256 byte tokens <0x00>..<0xFF>, printable
#     ASCII characters, and a few JSON-ish / English pieces.
#     add_space_prefix is off: with it on, json_schema/json_object requests
#     fail with "Failed to initialize samplers" (see comment in main()).
#   * tokenizer.chat_template holds a minimal ChatML Jinja template so that
#     /v1/chat/completions works (llama-server renders it with --jinja, which
#     is the default; the legacy detector recognises it as chatml too).
#   * Sampling is steered through a constant residual dimension (see main()):
#     raw bytes that would form invalid UTF-8 are practically never sampled
#     (llama-server answers HTTP 500 "does not match the expected peg-native
#     format" when generated text is not valid UTF-8), nor is "`" (so the
#     grammar's optional ```json fence is practically never chosen), and
#     free-form replies end after a few dozen tokens.
#   * Output is ~0.5 MB for the defaults.
import argparse
import os
import random
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGN = 32

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, \
    T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)

GGML_TYPE_F32 = 0

# llama.cpp token types
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE = \
    1, 2, 3, 4, 5, 6

SPACE = "\u2581"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

EXTRA_PIECES = [
    # JSON structure
    '{"', '"}', '":', '":"', '","', '",', '["', '"]', '"]}', '[]', '{}',
    '},', '}]', ':' + SPACE, ',' + SPACE, SPACE + '"', SPACE + '{', SPACE + '[',
    'true', 'false', 'null', SPACE + 'true', SPACE + 'false', SPACE + 'null',
    # a little English
    SPACE, SPACE + SPACE, SPACE + 'the', SPACE + 'a', SPACE + 'to', SPACE + 'of',
    SPACE + 'and', SPACE + 'is', SPACE + 'in', SPACE + 'it', SPACE + 'you',
    SPACE + 'ok', SPACE + 'yes', SPACE + 'no', SPACE + 'hello', SPACE + 'world',
    SPACE + 'goal', SPACE + 'task', SPACE + 'done', SPACE + 'plan',
    SPACE + 'agent', SPACE + 'room', SPACE + 'message', SPACE + 'reply',
    'ing', 'ed', 'er', 'es', 'th', 'he', 'an', 'in', 'on', 're', 'at', 'st',
    'name', 'type', 'text', 'status', 'items', 'value', 'id',
]


def build_vocab():
    tokens, types = [], []

    def add(piece, ttype):
        tokens.append(piece)
        types.append(ttype)

    add("<unk>", TOK_UNKNOWN)
    add("<s>", TOK_CONTROL)
    add("</s>", TOK_CONTROL)
    add("<|im_start|>", TOK_CONTROL)
    add("<|im_end|>", TOK_CONTROL)
    for b in range(256):
        add("<0x%02X>" % b, TOK_BYTE)
    seen = set(tokens)
    pieces = [chr(c) for c in range(0x21, 0x7F)] + EXTRA_PIECES
    for p in pieces:
        if p not in seen:
            seen.add(p)
            add(p, TOK_NORMAL)
    # SentencePiece scores: higher = merged first. Longer pieces win, ties by
    # order; special and byte tokens get 0 (they are never merge results).
    scores = []
    for i, (p, t) in enumerate(zip(tokens, types)):
        scores.append(float(len(p)) - i * 1e-3 if t == TOK_NORMAL else 0.0)
    return tokens, scores, types


class Writer:
    def __init__(self):
        self.kv = []       # encoded kv pairs
        self.tensors = []  # (name, dims, float list)

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    _scalar_fmt = {
        T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h",
        T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?",
        T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
    }

    def _val(self, vtype, v):
        if vtype == T_STRING:
            return self._str(v)
        return struct.pack(self._scalar_fmt[vtype], v)

    def add(self, key, vtype, value):
        self.kv.append(self._str(key) + struct.pack("<I", vtype) + self._val(vtype, value))

    def add_array(self, key, etype, values):
        body = b"".join(self._val(etype, v) for v in values)
        self.kv.append(self._str(key) + struct.pack("<I", T_ARRAY)
                       + struct.pack("<IQ", etype, len(values)) + body)

    def add_tensor(self, name, dims, data):
        n = 1
        for d in dims:
            n *= d
        assert len(data) == n, (name, dims, len(data))
        self.tensors.append((name, dims, data))

    def write(self, path):
        out = bytearray()
        out += GGUF_MAGIC
        out += struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for kv in self.kv:
            out += kv
        blobs, offset = [], 0
        for name, dims, data in self.tensors:
            blob = struct.pack("<%df" % len(data), *data)
            out += self._str(name)
            out += struct.pack("<I", len(dims))
            out += struct.pack("<%dQ" % len(dims), *dims)
            out += struct.pack("<IQ", GGML_TYPE_F32, offset)
            pad = (-len(blob)) % ALIGN
            blobs.append(blob + b"\0" * pad)
            offset += len(blob) + pad
        out += b"\0" * ((-len(out)) % ALIGN)
        for blob in blobs:
            out += blob
        tmp = path + ".tmp%d" % os.getpid()
        with open(tmp, "wb") as f:
            f.write(out)
        os.replace(tmp, path)
        return len(out)


def main():
    ap = argparse.ArgumentParser(description="write a tiny random llama GGUF")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=32768,
                    help="trained context length (llama-server caps slot context to "
                         "it; this vocabulary needs ~1 token per prompt character)")
    ap.add_argument("--logit-scale", type=float, default=0.25,
                    help="std of output weights (higher = peakier sampling)")
    ap.add_argument("--suppress", type=float, default=4.0,
                    help="output bias weight against non-ASCII/control bytes, '`', specials")
    ap.add_argument("--eog-bias", type=float, default=0.4,
                    help="output bias weight for </s> and <|im_end|>")
    a = ap.parse_args()
    if a.dim % a.heads:
        ap.error("--dim must be a multiple of --heads")

    rng = random.Random(a.seed)
    tokens, scores, types = build_vocab()
    n_vocab, d, ff = len(tokens), a.dim, a.ff
    head_dim = d // a.heads

    w = Writer()
    w.add("general.architecture", T_STRING, "llama")
    w.add("general.name", T_STRING, "ioa-tiny-random")
    w.add("general.file_type", T_UINT32, 0)  # all F32
    w.add("general.alignment", T_UINT32, ALIGN)
    w.add("llama.context_length", T_UINT32, a.ctx)
    w.add("llama.embedding_length", T_UINT32, d)
    w.add("llama.block_count", T_UINT32, a.layers)
    w.add("llama.feed_forward_length", T_UINT32, ff)
    w.add("llama.attention.head_count", T_UINT32, a.heads)
    w.add("llama.attention.head_count_kv", T_UINT32, a.heads)
    w.add("llama.rope.dimension_count", T_UINT32, head_dim)
    w.add("llama.rope.freq_base", T_FLOAT32, 10000.0)
    w.add("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-5)
    w.add("llama.vocab_size", T_UINT32, n_vocab)
    w.add("tokenizer.ggml.model", T_STRING, "llama")
    w.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    w.add_array("tokenizer.ggml.scores", T_FLOAT32, scores)
    w.add_array("tokenizer.ggml.token_type", T_INT32, types)
    w.add("tokenizer.ggml.unknown_token_id", T_UINT32, 0)
    w.add("tokenizer.ggml.bos_token_id", T_UINT32, 1)
    w.add("tokenizer.ggml.eos_token_id", T_UINT32, 2)
    w.add("tokenizer.ggml.eot_token_id", T_UINT32, tokens.index("<|im_end|>"))
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", T_BOOL, False)
    # SPM would otherwise insert a space after every special token, so the
    # prompt "<|im_start|>assistant\n" would tokenize as "... assistant";
    # llama-server feeds that generation prompt through the response_format
    # grammar (whose root starts with the literal prompt) and rejects it.
    w.add("tokenizer.ggml.add_space_prefix", T_BOOL, False)
    w.add("tokenizer.chat_template", T_STRING, CHATML_TEMPLATE)

    def rand(n, std):
        g = rng.gauss
        return [g(0.0, std) for _ in range(n)]

    def ones(n):
        return [1.0] * n

    # Steering without extra tensors: embedding dim 0 is a constant BIAS_ACT
    # for every token, and no layer writes to dim 0 (row 0 of attn_output and
    # ffn_down is zero), so after output_norm dim 0 is a large positive value
    # at every position. Column 0 of output.weight then acts as a per-token
    # logit bias: strongly negative for tokens we never want sampled (raw
    # non-ASCII / control bytes -> invalid UTF-8, which llama-server's output
    # parser rejects with HTTP 500; the "`" fence; special tokens), mildly
    # positive for end-of-generation tokens (shorter free-form replies).
    bias_act = 8.0
    bias = [0.0] * n_vocab
    for t, piece in enumerate(tokens):
        if piece in ("<unk>", "<s>", "<|im_start|>", "`"):
            bias[t] = -a.suppress
        elif types[t] == TOK_BYTE:
            b = int(piece[3:5], 16)
            if (b < 0x20 and b != 0x0A) or b >= 0x7F:
                bias[t] = -a.suppress
            elif b == 0x0A:
                bias[t] = -0.1
        elif piece in ("</s>", "<|im_end|>"):
            bias[t] = a.eog_bias

    def matrix(n_in, n_out, std, row0=None, col0=None):
        """n_out rows of n_in floats (ggml dims [n_in, n_out])."""
        m = rand(n_in * n_out, std)
        if row0 is not None:            # output feature 0 := row0 * input
            m[0:n_in] = [row0] * n_in
        if col0 is not None:            # input feature 0 weights
            for r in range(n_out):
                m[r * n_in] = col0[r]
        return m

    # dims are ggml order: ne0 (input / row length) first
    embd = rand(d * n_vocab, 1.0)
    for t in range(n_vocab):
        embd[t * d] = bias_act
    w.add_tensor("token_embd.weight", [d, n_vocab], embd)
    for i in range(a.layers):
        p = "blk.%d." % i
        s_in = d ** -0.5
        w.add_tensor(p + "attn_norm.weight", [d], ones(d))
        w.add_tensor(p + "attn_q.weight", [d, d], matrix(d, d, s_in))
        w.add_tensor(p + "attn_k.weight", [d, d], matrix(d, d, s_in))
        w.add_tensor(p + "attn_v.weight", [d, d], matrix(d, d, s_in))
        w.add_tensor(p + "attn_output.weight", [d, d], matrix(d, d, s_in, row0=0.0))
        w.add_tensor(p + "ffn_norm.weight", [d], ones(d))
        w.add_tensor(p + "ffn_gate.weight", [d, ff], matrix(d, ff, s_in))
        w.add_tensor(p + "ffn_up.weight", [d, ff], matrix(d, ff, s_in))
        w.add_tensor(p + "ffn_down.weight", [ff, d], matrix(ff, d, ff ** -0.5, row0=0.0))
    w.add_tensor("output_norm.weight", [d], ones(d))
    w.add_tensor("output.weight", [d, n_vocab],
                 matrix(d, n_vocab, a.logit_scale, col0=bias))

    size = w.write(a.out)
    print("%s: %d bytes, vocab %d, %d layers, dim %d" % (a.out, size, n_vocab, a.layers, d),
          file=sys.stderr)


if __name__ == "__main__":
    main()
