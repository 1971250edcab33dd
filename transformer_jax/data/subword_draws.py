"""Seeded subword draws: SentencePiece's sampling rules, drawn from numpy's generator.

`SentencePieceTokenizer.encode_sampled` (data/sentencepiece_tokenizer.py) draws through
these functions: unigram segmentations from the whole lattice (forward filtering, backward
sampling) or from the n best, and BPE-dropout.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Sequence

import numpy as np
import sentencepiece as spm

# SentencePiece samples with `absl::BitGen` since 0.2.2, whose seed sequence Abseil salts with
# per-process entropy: one `set_random_generator_seed` repeats its draws within a process
# only (with 0.2.3, 35-56 % of fra-eng sentences drawn alike by two processes; 0.2.0 drew
# with an unsalted mt19937, all alike). The functions below follow SentencePiece's rules
# (unigram_model.cc, bpe_model.cc, sentencepiece_processor.cc) and draw from numpy's PCG64
# instead, whose stream depends on its seed alone (and on numpy's version, pinned: NEP 19
# lets a release change a stream). Their cost and draws against SentencePiece's own:
# benchmarks/sampling_draws.py.

_UNK_PENALTY = 10.0  # SentencePiece's kUnkPenalty: an unknown character scores min - 10
_DENSE_ENTRIES = 1 << 22  # the trie's table of children: at most 16 MB (the hour's: 3 MB)


@dataclasses.dataclass(frozen=True)
class PieceTable:
    """A model's NORMAL pieces as the draws read them: scores, ids and a character trie.

    Trie nodes are numbered shallow first (node 0 is the root). A character is its index c
    in `alphabet` plus one (0: in no piece). The child of node n < `dense_nodes` by c is
    `dense[n * (A + 1) + c]` (-1: none); deeper nodes' edges are the sorted keys
    `n * (A + 1) + c` of `edge_keys`. Shallow nodes are the ones most looked up (every
    position of a text starts at the root), and a table lookup costs a fifth of a search.
    """

    unigram: bool  # else BPE
    scores: np.ndarray  # (V,) float64: log-probability (unigram) or merge priority (BPE)
    unk_id: int
    unk_score: float  # the lattice's score of an unknown character: min NORMAL score - 10
    ids: dict[str, int]  # NORMAL piece -> id
    chars: np.ndarray  # (V,) int64: each piece's length in characters
    alphabet: np.ndarray  # (A,) int64 sorted code points of the pieces' characters
    dense: np.ndarray  # (dense_nodes * (A + 1),) int32
    dense_nodes: int
    edge_keys: np.ndarray  # (E,) int64 sorted: the edges of nodes >= dense_nodes
    edge_child: np.ndarray  # (E,) int64
    node_piece: np.ndarray  # (N,) int64: the id of the piece a node spells, or -1
    depth: int  # the longest piece, in characters

    @classmethod
    def of(cls, model_proto: bytes) -> PieceTable:
        from sentencepiece import sentencepiece_model_pb2 as model_pb2

        model = model_pb2.ModelProto.FromString(model_proto)
        kind = model_pb2.ModelProto.SentencePiece
        plain = (kind.NORMAL, kind.UNKNOWN, kind.CONTROL)
        other = sorted({kind.Type.Name(p.type) for p in model.pieces if p.type not in plain})
        model_type = model.trainer_spec.model_type
        if other or model_type not in (model.trainer_spec.UNIGRAM, model.trainer_spec.BPE):
            raise ValueError(
                "subword sampling draws unigram and BPE models of NORMAL pieces (those of "
                f"SentencePieceTokenizer.train); this model has {other or 'another type'}: "
                "retrain the tokenizer or set data.sp_sampling_alpha=0."
            )
        ids = {p.piece: i for i, p in enumerate(model.pieces) if p.type == kind.NORMAL}
        alphabet = np.array(sorted({ord(ch) for piece in ids for ch in piece}), np.int64)
        index = {chr(code): i + 1 for i, code in enumerate(alphabet.tolist())}
        width = len(alphabet) + 1
        # The trie by prefix: node k spells prefixes[k]; then renumbered shallow first.
        prefixes = sorted({p[:k] for p in ids for k in range(len(p) + 1)}, key=len)
        number = {prefix: k for k, prefix in enumerate(prefixes)}
        dense_nodes = min(len(prefixes), _DENSE_ENTRIES // width)
        dense = np.full(dense_nodes * width, -1, np.int32)
        edges = {}
        for child, prefix in enumerate(prefixes[1:], start=1):
            key = number[prefix[:-1]] * width + index[prefix[-1]]
            if key < len(dense):
                dense[key] = child
            else:
                edges[key] = child
        keys = sorted(edges)
        scores = np.array([p.score for p in model.pieces], np.float64)
        return cls(
            unigram=model_type == model.trainer_spec.UNIGRAM,
            scores=scores,
            unk_id=next(i for i, p in enumerate(model.pieces) if p.type == kind.UNKNOWN),
            unk_score=float(scores[list(ids.values())].min()) - _UNK_PENALTY,
            ids=ids,
            chars=np.array([len(p.piece) for p in model.pieces], np.int64),
            alphabet=alphabet,
            dense=dense,
            dense_nodes=dense_nodes,
            edge_keys=np.array(keys, np.int64),
            edge_child=np.array([edges[k] for k in keys], np.int64),
            node_piece=np.array([ids.get(prefix, -1) for prefix in prefixes], np.int64),
            depth=max(map(len, ids)),
        )

    def children(self, node: np.ndarray, char: np.ndarray) -> np.ndarray:
        """The trie child of each `node` by character index `char` (same shape); -1: none."""
        key = node * (len(self.alphabet) + 1) + char
        shallow = node < self.dense_nodes
        child = np.full(key.shape, -1, np.int64)
        child[shallow] = self.dense[key[shallow]]
        deep = np.flatnonzero(~shallow)
        if len(deep) and len(self.edge_keys):
            at = np.minimum(np.searchsorted(self.edge_keys, key[deep]), len(self.edge_keys) - 1)
            found = self.edge_keys[at] == key[deep]
            child[deep[found]] = self.edge_child[at[found]]
        return child


def _merge_unknowns(ids: list[int], unk_id: int) -> list[int]:
    """Consecutive unknown pieces as one, as SentencePiece returns them."""
    return [i for k, i in enumerate(ids) if i != unk_id or k == 0 or ids[k - 1] != unk_id]


def _lattice(
    table: PieceTable, texts: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """SentencePiece's unigram lattice of every normalized text at once.

    The texts are joined with one separator each: text t holds positions
    starts[t]..starts[t+1]-2 and its separator starts[t+1]-1. Returns (begin, end, piece,
    starts): each of the M nodes spans characters begin..end-1 with piece id `piece` (M,),
    and starts is (T+1,). Like SentencePiece, every vocabulary piece occurring at a position
    is a node, and a position where no one-character piece starts gets an unknown node.
    """
    joined = "\0".join(texts) + "\0"
    codes = np.frombuffer(joined.encode("utf-32-le"), np.uint32).astype(np.int64)  # (N,)
    index = np.searchsorted(table.alphabet, codes)
    known = table.alphabet[np.minimum(index, len(table.alphabet) - 1)] == codes
    chars = np.where(known, index + 1, 0)  # (N,) 0: a separator or a character in no piece
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    starts = np.concatenate([[0], np.cumsum(lengths + 1)])  # (T+1,)
    # Walk the trie from every position at once: after step d, `node` spells the d + 1
    # characters from `pos`. A walk stops at the first character no piece continues with,
    # at the latest at its text's separator (code 0, in no piece).
    pos = np.flatnonzero(chars)
    node = np.zeros_like(pos)
    found_begin, found_end, found_piece = [], [], []
    single = np.zeros(len(chars), bool)  # where a one-character piece starts
    for d in range(table.depth):
        child = table.children(node, chars[pos + d])
        match = child >= 0
        pos, node = pos[match], child[match]
        piece = table.node_piece[node]
        ends = piece >= 0
        found_begin.append(pos[ends])
        found_end.append(pos[ends] + d + 1)
        found_piece.append(piece[ends])
        if d == 0:
            single[pos[ends]] = True
        if not len(pos):
            break
    single[starts[1:] - 1] = True  # separators are no position of a text
    unknown = np.flatnonzero(~single)
    begin = np.concatenate([*found_begin, unknown])
    end = np.concatenate([*found_end, unknown + 1])
    piece = np.concatenate([*found_piece, np.full(len(unknown), table.unk_id)])
    return begin, end, piece, starts


def unigram_draws(
    table: PieceTable, texts: Sequence[str], alpha: float, rng: np.random.Generator
) -> list[list[int]]:
    """Segmentations of the normalized `texts`, each drawn with probability ∝ P(x)^alpha.

    SentencePiece's `Lattice::Sample`: forward filtering sums, for every position, the
    weights exp(alpha * score) of all segmentations of its text up to there (log_z); backward
    sampling then picks, from each text's end, the last piece ending there with probability
    exp(log_z[begin] + alpha * score - log_z[end]), and goes on from its begin. All texts are
    filtered and sampled together, one character offset (or one piece) a numpy step.
    """
    begin, end, piece, starts = _lattice(table, texts)
    lengths = np.diff(starts) - 1  # (T,)
    text_start = np.repeat(starts[:-1], lengths + 1)  # (N,) the start of each position's text
    score = alpha * np.where(piece == table.unk_id, table.unk_score, table.scores[piece])
    # Nodes by end position (backward sampling's groups), then stably by their end's offset
    # in its text (forward filtering's order): one end position stays one run of nodes.
    by_end = np.argsort(end, kind="stable")
    offset = (end - text_start[begin])[by_end]  # (M,) 1..len(text)
    if lengths.max(initial=0) < 2**16:
        offset = offset.astype(np.uint16)  # a stable sort of 16-bit keys is a radix sort
    by_offset = np.argsort(offset, kind="stable")
    order = by_end[by_offset]
    # ----- forward filtering: log_z[p], the summed weights of a text's segmentations to p
    b, e, w = begin[order], end[order], score[order]
    first = np.flatnonzero(np.r_[True, e[1:] != e[:-1]])  # (G,) first node of each group
    offset_bounds = np.searchsorted(offset[by_offset], np.arange(1, lengths.max(initial=0) + 2))
    group_bounds = np.searchsorted(first, offset_bounds)
    log_z = np.full(starts[-1], -np.inf)
    log_z[starts[:-1]] = 0.0
    for k in range(len(offset_bounds) - 1):  # every begin lies at a smaller offset
        lo, hi = offset_bounds[k], offset_bounds[k + 1]
        heads = first[group_bounds[k] : group_bounds[k + 1]]
        log_z[e[heads]] = np.logaddexp.reduceat(log_z[b[lo:hi]] + w[lo:hi], heads - lo)
    # ----- backward sampling: from each text's end, the piece ending there, then its begin
    b, e, node_piece = begin[by_end], end[by_end], piece[by_end]
    group_start = np.searchsorted(e, np.arange(starts[-1] + 1))  # (N+1,) by end position
    prob = np.exp(log_z[b] + score[by_end] - log_z[e])
    cum = np.concatenate([[0.0], np.cumsum(prob)])  # (M+1,)
    steps = np.zeros(len(texts), np.int64)
    path = np.zeros((len(texts), lengths.max(initial=0)), np.int64)
    uniform = rng.random(path.shape)
    rows = np.flatnonzero(lengths)
    at = starts[rows] + lengths[rows]  # each text's end
    while len(rows):
        lo, hi = group_start[at], group_start[at + 1]
        target = cum[lo] + uniform[rows, steps[rows]] * (cum[hi] - cum[lo])
        # side="right" never lands on a node of probability 0 (cum does not grow there).
        chosen = np.clip(np.searchsorted(cum, target, side="right") - 1, lo, hi - 1)
        path[rows, steps[rows]] = chosen
        steps[rows] += 1
        at = b[chosen]
        more = at > starts[rows]
        rows, at = rows[more], at[more]
    ids = node_piece[path]  # (T, max length): each text's pieces, last first
    unknown = (ids == table.unk_id) & (np.arange(ids.shape[1]) < steps[:, None])
    drawn = [ids[t, : steps[t]][::-1].tolist() for t in range(len(texts))]
    for t in np.flatnonzero(unknown.any(axis=1)).tolist():
        drawn[t] = _merge_unknowns(drawn[t], table.unk_id)
    return drawn


def nbest_draws(
    table: PieceTable,
    sp: spm.SentencePieceProcessor,
    texts: list[str],
    alpha: float,
    nbest: int,
    rng: np.random.Generator,
) -> list[list[int]]:
    """One of SentencePiece's `nbest` best segmentations of each text, drawn with
    probability ∝ exp(alpha * score), its log-probability (SentencePiece's SampleEncode).

    A candidate's score is its pieces' scores plus the lattice's score of each character it
    leaves unknown (its normalized length less its known pieces' lengths).
    """
    candidates = sp.nbest_encode(texts, nbest_size=nbest)  # per text, best first
    per_text = np.fromiter(map(len, candidates), np.int64, len(texts))  # (T,) >= 1
    flat = list(itertools.chain.from_iterable(candidates))  # (C,) candidates
    pieces = np.fromiter(map(len, flat), np.int64, len(flat))
    ids = np.fromiter(itertools.chain.from_iterable(flat), np.int64, int(pieces.sum()))
    owner = np.repeat(np.arange(len(flat)), pieces)  # (P,) the candidate of each piece
    known = ids != table.unk_id
    score = np.bincount(owner[known], table.scores[ids[known]], minlength=len(flat))
    covered = np.bincount(owner[known], table.chars[ids[known]], minlength=len(flat))
    length = np.repeat([len(t) for t in sp.normalize(texts)], per_text)
    log_p = alpha * (score + table.unk_score * (length - covered))  # (C,)
    first = np.concatenate([[0], np.cumsum(per_text)[:-1]])  # (T,) each text's first
    prob = np.exp(log_p - np.repeat(np.maximum.reduceat(log_p, first), per_text))
    cum = np.concatenate([[0.0], np.cumsum(prob)])
    lo, hi = first, first + per_text
    target = cum[lo] + rng.random(len(texts)) * (cum[hi] - cum[lo])
    chosen = np.clip(np.searchsorted(cum, target, side="right") - 1, lo, hi - 1)
    return [flat[c] for c in chosen.tolist()]


def bpe_dropout(table: PieceTable, text: str, alpha: float, rng: np.random.Generator) -> list[int]:
    """BPE-dropout of one normalized text: SentencePiece's BPE merges (the adjacent pair
    whose merged piece scores highest first, the leftmost among equals), each skipped with
    probability `alpha` when its turn comes (bpe_model.cc)."""
    symbols = list(text)
    n = len(symbols)
    following = list(range(1, n)) + [-1]
    preceding = list(range(-1, n - 1))
    agenda: list[tuple[float, int, int, int]] = []  # (-score, left, right, merged length)

    def consider(left: int, right: int) -> None:
        if left >= 0 and right >= 0:
            merged = symbols[left] + symbols[right]
            piece_id = table.ids.get(merged)
            if piece_id is not None:
                heapq.heappush(agenda, (-table.scores[piece_id], left, right, len(merged)))

    for left in range(n - 1):
        consider(left, left + 1)
    # Each merge is pushed once, by a new pair: at most 3n draws (n - 1 + 2 per merge).
    skip = iter((rng.random(3 * n) < alpha).tolist()) if alpha < 1 else None
    while skip is not None and agenda:
        _, left, right, length = heapq.heappop(agenda)
        if not symbols[left] or not symbols[right]:
            continue  # stale: one side was merged away
        if len(symbols[left]) + len(symbols[right]) != length:
            continue  # stale: one side grew
        if alpha > 0 and next(skip):
            continue
        symbols[left] += symbols[right]
        symbols[right] = ""
        following[left] = following[right]
        if following[right] >= 0:
            preceding[following[right]] = left
        consider(preceding[left], left)
        consider(left, following[left])
    ids = [table.ids.get(symbol, table.unk_id) for symbol in symbols if symbol]
    return _merge_unknowns(ids, table.unk_id)
