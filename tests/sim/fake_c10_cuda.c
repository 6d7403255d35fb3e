/* A stand-in for PyTorch's libc10_cuda.so (tests/e2e/scripts/simcuda.py as_pytorch): a library of that name loaded
 * into the process is how cdsa tells a PyTorch program (report/hints.h HintContext::pytorch). It holds nothing. */
int cdsa_fake_c10_cuda_marker = 1;
