"""Special token ids shared by every tokenizer in the framework.

Both the word-level tokenizer (the d2l book's `Vocab`) and SentencePiece use the same four ids,
so that models, losses and decoders never need to ask which tokenizer produced a batch.
The book puts `<unk>` first (`<unk>, <pad>, <bos>, <eos>`); we put `<pad>` at 0 because padding
with zeros (`np.zeros`) is then free. This is a permutation of embedding rows, so it does not
change results compared with the book.
"""

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3

PAD = "<pad>"
BOS = "<bos>"
EOS = "<eos>"
UNK = "<unk>"

# Ordered so that SPECIAL_TOKENS[i] has id i.
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
NUM_SPECIAL = len(SPECIAL_TOKENS)
