"""References every ladder step is checked against: exact fp32 attention, a chunked online-softmax
mirror of the kernels' algorithm, FA4's own numerics rule, and the stock kernels we score against
(FlashAttention-4, and cuDNN through PyTorch's SDPA as a context column)."""

# Set to "1" in a child process run under compute-sanitizer (harness/gpu/isolate.py): numerics.py
# then computes the reference on the CPU. Here, not in numerics.py, so reading it imports no torch.
CPU_REFERENCE_ENV = "LADDER_CPU_REFERENCE"
