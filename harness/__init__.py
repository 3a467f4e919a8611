"""The ladder's harness: step discovery, CPU compile + SASS proof, GPU measurement against stock
FlashAttention-4, recorded results and the generated blocks of the writeups. One concern a module."""
