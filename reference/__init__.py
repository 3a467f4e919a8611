"""References every ladder step is checked against: exact fp32 attention, a chunked online-softmax
mirror of the kernels' algorithm, FA4's own numerics rule, and the stock kernels we score against
(FlashAttention-4, and cuDNN through PyTorch's SDPA as a context column)."""
