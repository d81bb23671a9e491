#pragma once
// The tokenizer of the built-in models (builtin:tiny, builtin:mamba2-130m, …), which have random
// weights and no tokenizer of their own. It is synthetic: a byte-level BPE generated in code so
// that text goes in and comes out of the built-in models. Id 0 is <|endoftext|> (special, the
// EOS), ids 1-256 are the 256 bytes, then merges learned from a fixed embedded English text until
// the text has no pair left that occurs twice; past that (large vocabularies) the remaining ids are
// filled with concatenations of learned word pieces, in a fixed order, up to the model's vocab
// size. Same bits on every machine: no floating point, no hashing order.
#include <string>

namespace parity::tokenizer {

// tokenizer.json text for a vocabulary of `vocab_size` ids (at least 258).
std::string builtin_tokenizer_json(int vocab_size);

}  // namespace parity::tokenizer
