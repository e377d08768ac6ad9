"""Shared layers: embeddings, attention masks and Transformer blocks (written once)."""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from seqbench.models.packed import (
    Buckets,
    bucket_masks,
    int_dropout,
    int_dropout_attention,
    packed_attention,
)
from seqbench.models.pieces import RowPieces, pack

Norm = Literal["pre", "post", "sasrec"]


def check_item_ids(ids: torch.Tensor, message: str) -> None:
    """Raise ValueError(message) if an id is negative (0 = padding). A host read: training
    checks its batches with it where they are built, on the CPU."""
    if ids.numel() and bool((ids < 0).any()):
        raise ValueError(message)


def causal_mask(item_ids: torch.Tensor) -> torch.Tensor:
    """Bool [B, T, T]: query i may read key j iff both ids are non-zero and j <= i. No host
    read: training batches' ids are checked where they are built (`check_items`)."""
    with torch.no_grad():
        real = item_ids != 0
        t = item_ids.shape[1]
        tril = torch.ones(t, t, dtype=torch.bool, device=item_ids.device).tril()
        return real[:, :, None] & real[:, None, :] & tril


def check_items(batch: dict[str, torch.Tensor], *keys: str) -> None:
    """Check a training batch's item tensors `keys` as it is built: non-negative ids (host
    reads of CPU tensors, not in the step)."""
    for key in keys:
        check_item_ids(batch[key], f"training batch: {key} must be non-negative item ids")


def key_padding_mask(seqs: torch.Tensor) -> torch.Tensor:
    """Bool [B, 1, T, T]: every query may read every non-padding key (bidirectional)."""
    keys = seqs != 0
    return keys[:, None, None, :].expand(-1, 1, seqs.shape[1], -1)


def with_self(mask: torch.Tensor) -> torch.Tensor:
    """Let each query read itself too, so no attention row is empty (padding rows give no NaN)."""
    t = mask.shape[-1]
    return mask | torch.eye(t, dtype=torch.bool, device=mask.device)


class Dropout(nn.Dropout):
    """nn.Dropout; with `fast` set (`fast_dropout`), its masks from `int_dropout`."""

    fast: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast and self.training and self.p > 0.0:
            return int_dropout(x, self.p)
        return super().forward(x)


def fast_dropout(module: nn.Module) -> None:
    """Draw every mask of `module`'s `Dropout` layers and of its packed attention with
    `int_dropout` (the packed layout's masks: `batching=packed`)."""
    for m in module.modules():
        if isinstance(m, Dropout | MultiHeadAttention):
            m.fast = True


class SeqEmbedding(nn.Module):
    """Item + learned position embedding; positions count from the right end of the window.

    Position of the last column is always max_len - 1, so a batch trimmed to its longest
    sequence gives each item the same position embedding as the untrimmed window.
    """

    def __init__(
        self,
        n_tokens: int,
        d: int,
        max_len: int,
        dropout: float,
        scale: bool = False,
        layer_norm: bool = False,
        init: Literal["bert", "torch"] = "bert",
        from_left: bool = False,
    ) -> None:
        """`init`: BERT's truncated normal (std 0.02), or PyTorch's default N(0, 1).

        `from_left`: position 0 is each row's first real item (RecBole's right-padded layout)
        instead of the right-end counting above; padding takes position 0 and is masked.
        """
        super().__init__()
        self.item = nn.Embedding(n_tokens, d, padding_idx=0)
        self.pos = nn.Embedding(max_len, d)
        if init == "bert":
            for table in (self.item, self.pos):
                nn.init.trunc_normal_(table.weight, std=0.02, a=-0.04, b=0.04)
        with torch.no_grad():
            self.item.weight[0].zero_()
        self.max_len = max_len
        self.from_left = from_left
        self.scale = math.sqrt(d) if scale else 1.0
        self.norm = nn.LayerNorm(d) if layer_norm else nn.Identity()
        self.drop = Dropout(dropout)

    def positions(self, length: int, device: torch.device) -> torch.Tensor:
        if length > self.max_len:
            raise ValueError(f"sequence length {length} exceeds max_len {self.max_len}")
        return torch.arange(self.max_len - length, self.max_len, device=device)

    def forward(self, seqs: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        if self.from_left:
            pos = self.pos(((seqs != 0).cumsum(1) - 1).clamp_min(0))
        else:
            pos = self.pos(self.positions(seqs.shape[1], seqs.device))
        x = self.item(seqs) * self.scale + pos
        if extra is not None:
            x = x + extra
        return self.drop(self.norm(x))

    def packed(
        self, seqs: torch.Tensor, plan: RowPieces, rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` at the packed items of `seqs` (`pieces.pack`): their ids [N] and outputs
        [N, d], at the positions `forward` gives them; `rows`: their item rows, if looked up."""
        ids, width = pack(seqs, plan, seqs.shape[1]), seqs.shape[1]
        if self.from_left:
            pos = pack((seqs != 0).cumsum(1) - 1, plan, width)
        else:
            pos = plan.flat % width + (self.max_len - width)
        items = self.item(ids) if rows is None else rows
        x = items * self.scale + self.pos(pos)
        return ids, self.drop(self.norm(x))


class FeedForward(nn.Module):
    """Point-wise FFN d → hidden → d with ReLU or GELU (built-in, never hand-written)."""

    def __init__(self, d: int, hidden: int, dropout: float, act: str) -> None:
        super().__init__()
        self.lin1 = nn.Linear(d, hidden)
        self.lin2 = nn.Linear(hidden, d)
        self.drop = Dropout(dropout)
        acts = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "relu": nn.ReLU()}
        self.act = acts[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(self.drop(self.act(self.lin1(x))))


class MultiHeadAttention(nn.Module):
    """Multi-head attention through scaled_dot_product_attention with a boolean mask (with
    `fast` masks while training: written out, its dropout from `int_dropout`)."""

    fast: bool = False

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"d={d} must be divisible by heads={heads}")
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.dropout = dropout

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | Buckets,
    ) -> torch.Tensor:
        """[B, T, d] inputs with a mask [B, 1, T, T], or packed items [N, d] with `Buckets`
        (projections over all N items at once, attention block by block)."""
        p = self.dropout if self.training else 0.0
        if isinstance(mask, Buckets):
            q, k, v = self.q(query), self.k(key), self.v(value)
            return self.out(packed_attention(q, k, v, mask, self.heads, p, self.fast))
        q, k, v = self.split(self.q(query)), self.split(self.k(key)), self.split(self.v(value))
        if self.fast and p > 0.0:
            o = int_dropout_attention(q, k, v, mask, p)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        b, _, t, _ = o.shape
        return self.out(o.transpose(1, 2).reshape(b, t, -1))


class TransformerBlock(nn.Module):
    """Self-attention + FFN block in one of three residual/norm layouts.

    post   : BERT4Rec   x = LN(x + drop(attn(x))); x = LN(x + drop(ffn(x)))
    pre    : CBiT       x = x + drop(attn(LN(x))); x = x + drop(ffn(LN(x)))
    sasrec : SASRec     q = LN(x); x = q + attn(q, x, x); x = LN(x); x = x + drop(ffn(x))
    """

    def __init__(
        self,
        d: int,
        heads: int,
        dropout: float,
        hidden: int,
        act: str,
        norm: Norm,
        attn_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d, heads, dropout if attn_dropout is None else attn_dropout)
        self.ffn = FeedForward(d, hidden, dropout, act)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.drop = Dropout(dropout)
        #: the sasrec layout's dropout on the attention's output (SASRec's `attn_out_dropout`)
        self.attn_drop = Dropout(dropout)
        self.norm = norm

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | Buckets, qk: torch.Tensor | None = None
    ) -> torch.Tensor:
        """`qk`, when given, replaces x as the source of queries and keys (NOVA layers); x is
        [B, T, d] with a mask, or packed items [N, d] with `Buckets` (every other layer is
        position-wise)."""
        src = x if qk is None else qk
        if self.norm == "post":
            x = self.ln1(x + self.drop(self.attn(src, src, x, mask)))
            return self.ln2(x + self.drop(self.ffn(x)))
        if self.norm == "pre":
            h, hs = self.ln1(x), self.ln1(src)
            x = x + self.drop(self.attn(hs, hs, h, mask))
            return x + self.drop(self.ffn(self.ln2(x)))
        q = self.ln1(x)
        x = q + self.attn_drop(self.attn(q, src, x, mask))
        x = self.ln2(x)
        return x + self.drop(self.ffn(x))


class TransformerEncoder(nn.Module):
    """A stack of blocks; padding positions are zeroed after each block unless `keep_pad`.

    `keep_pad` (CBiT's code): padding positions keep their position embedding and are computed
    like any other query (they read the real items only), so their outputs are not zero.
    `block_dropout` adds a dropout on each block's output (CBiT's code).
    """

    def __init__(
        self,
        d: int,
        heads: int,
        layers: int,
        dropout: float,
        hidden: int,
        act: str,
        norm: Norm,
        final_norm: bool = False,
        keep_pad: bool = False,
        block_dropout: bool = False,
    ) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            TransformerBlock(d, heads, dropout, hidden, act, norm) for _ in range(layers)
        )
        self.final = nn.LayerNorm(d) if final_norm else nn.Identity()
        self.keep_pad = keep_pad
        self.out_drop = Dropout(dropout) if block_dropout else nn.Identity()

    def forward(self, x: torch.Tensor, seqs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.keep_pad:
            for block in self.blocks:
                x = self.out_drop(block(x, mask))
            return self.final(x)
        keep = (seqs != 0).unsqueeze(-1).to(x.dtype)
        mask = with_self(mask)
        x = x * keep
        for block in self.blocks:
            x = self.out_drop(block(x, mask)) * keep
        return self.final(x)

    def packed(self, ids: torch.Tensor, x: torch.Tensor, plan: RowPieces) -> torch.Tensor:
        """`forward` over packed items x [N, d] of ids [N] laid out by `plan` (no padding rows;
        attention per block): the same values at every item."""
        if self.keep_pad:
            raise ValueError("keep_pad encoders compute padding positions: they cannot pack")
        buckets = bucket_masks(ids, plan.blocks(), plan.spread, plan.real)
        for block in self.blocks:
            x = self.out_drop(block(x, buckets))
        return self.final(x)


class CausalStack:
    """A model's `emb` (`SeqEmbedding`) and `encoder` (`TransformerEncoder`) read causally, as
    one function of the rows; declared on the class (`stack = CausalStack()`), read on a model
    it is bound to it. Its layers are position-wise but for causal attention, so the training
    engine may run it packed (`packed`: the same values at every item)."""

    def __init__(self, model: nn.Module | None = None) -> None:
        self.model = model

    def __get__(self, model: nn.Module | None, owner: type | None = None) -> CausalStack:
        return self if model is None else CausalStack(model)

    def __call__(self, seqs: torch.Tensor) -> torch.Tensor:
        m = self.model
        return m.encoder(m.emb(seqs), seqs, causal_mask(seqs)[:, None])

    def packed(
        self, seqs: torch.Tensor, plan: RowPieces, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The outputs [N, d] at the packed items of `seqs` (`pieces.pack`); `rows`: their
        item embedding rows, where already looked up."""
        ids, x = self.model.emb.packed(seqs, plan, rows)
        return self.model.encoder.packed(ids, x, plan)


def causal_key_mask(seqs: torch.Tensor) -> torch.Tensor:
    """Bool [B, 1, T, T]: query i reads key j iff j <= i and j is not padding."""
    t = seqs.shape[1]
    tril = torch.ones(t, t, dtype=torch.bool, device=seqs.device).tril()
    return ((seqs != 0)[:, None, None, :] & tril).contiguous()


def pad_left(seqs: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pad [B, T] item ids with 0 to [B, width]: models whose layers mix every position of
    the window (Fourier filters) see the same window whatever the batch was trimmed to."""
    if seqs.shape[1] > width:
        raise ValueError(f"sequence length {seqs.shape[1]} exceeds max_len {width}")
    return F.pad(seqs, (width - seqs.shape[1], 0))


class ResidualFFN(nn.Module):
    """The S3-Rec lineage's FFN (FMLP-Rec, BSARec, FEARec): LN(x + drop(W₂ act(W₁ x))), 4d wide."""

    def __init__(self, d: int, dropout: float, act: str = "gelu", inner_dropout: float = 0.0):
        super().__init__()
        self.lin1 = nn.Linear(d, 4 * d)
        self.lin2 = nn.Linear(4 * d, d)
        self.act = {"gelu": nn.GELU(), "relu": nn.ReLU()}[act]
        self.inner = nn.Dropout(inner_dropout)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.drop(self.lin2(self.inner(self.act(self.lin1(x))))))


def linear_scan(lamb: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """h_t = lamb · h_{t-1} + u_t (h_{-1} = 0) for u [B, T, H] and a diagonal lamb [H]
    (complex or real), by a log-depth parallel prefix scan: ⌈log₂ T⌉ shifted multiply-adds,
    no loop over positions."""
    h, t, shift, power = u, u.shape[1], 1, lamb
    while shift < t:
        carried = torch.cat([torch.zeros_like(h[:, :shift]), h[:, :-shift]], 1)
        h = h + power * carried
        power, shift = power * power, shift * 2
    return h


def normal_init(module: nn.Module) -> None:
    """N(0, 0.02²) weights for linear and embedding layers, zero biases: the init of the
    S3-Rec lineage's codes (BSARec, FMLP-Rec) and of RecBole (LinRec); `model.apply` it."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, 0.0, 0.02)
    if isinstance(module, nn.Linear):
        nn.init.zeros_(module.bias)
